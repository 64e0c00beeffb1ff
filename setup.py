"""Package discovery only; all metadata is in pyproject.toml.

The Jinja2 templates are kept at the top level in reports/templates/ and installed as the package
`perfscope._templates`, so a plain (non-editable) `pip install .` can render reports.
"""

from setuptools import find_packages, setup

setup(
    packages=find_packages(include=["perfscope", "perfscope.*"]) + ["perfscope._templates"],
    package_dir={"perfscope._templates": "reports/templates"},
    package_data={
        "perfscope._templates": ["*.j2", "*.html", "**/*.j2", "**/*.html", "*.css", "*.js"],
        "perfscope.report": ["vendor/*.js", "vendor/*.LICENSE", "vendor/*.md"],
    },
)
