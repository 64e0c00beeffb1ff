"""`python -m perfscope` is the `perfscope` command."""

import sys

from perfscope.cli import main

sys.exit(main())
