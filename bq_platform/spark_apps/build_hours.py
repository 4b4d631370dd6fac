"""The hourly build's main file for ``spark-submit`` and Dataproc PySpark jobs.

Usage and exit statuses: :mod:`bq_platform.lib.build_job`. Its path::

    python -c 'import bq_platform.spark_apps.build_hours as m; print(m.__file__)'
"""

import sys

from bq_platform.lib.build_job import main

if __name__ == "__main__":
    sys.exit(main())
