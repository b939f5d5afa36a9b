import sys

from judgeopt.cli import main

sys.exit(main())
