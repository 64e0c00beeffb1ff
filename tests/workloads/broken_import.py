import perfscope
import a_module_that_does_not_exist  # noqa: F401  (line 2: the test expects this line number)


def workload():
    return None
