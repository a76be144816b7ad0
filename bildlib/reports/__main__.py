import sys

from bildlib.reports.readme import main

sys.exit(main())
