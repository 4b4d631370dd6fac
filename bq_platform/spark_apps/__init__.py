"""Spark application files: scripts that ``spark-submit`` and Dataproc run as a job's main file.

Each is an entry point (arguments, output, exit status) around :mod:`bq_platform.lib` functions,
in a folder of its own: Python puts a script's folder first on ``sys.path``, and this one holds
no module another import could mistake for a library.
"""
