import sys

from nictune.cli import main

sys.exit(main())
