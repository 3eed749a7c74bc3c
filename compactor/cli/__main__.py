import sys

from compactor.cli.app import main

sys.exit(main())
