def workload():
    return {"model": None}
