"""The report's Jinja2 templates, installed as ``perfscope._templates`` (see setup.py); no code lives here."""
