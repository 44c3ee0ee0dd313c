"""`python -m fuzz`: fuzz a coordinator node beside a live group (`fuzz.run`)."""

import sys

from fuzz.run import main

sys.exit(main())
