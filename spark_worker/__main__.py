import sys

from spark_worker.server import main

sys.exit(main())
