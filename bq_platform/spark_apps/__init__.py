"""Spark application files: scripts that ``spark-submit`` and Dataproc run as a job's main file.

Each is a few lines around a :mod:`bq_platform.lib` function, in a folder of its own: Python puts
a script's folder first on ``sys.path``, and this one holds no module another import could
mistake for a library.
"""
