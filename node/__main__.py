import sys

from node.faces.cli import main

sys.exit(main())
