"""On ``PYTHONPATH`` only while ``make mutants`` traces the tests (tools/mutants.py): a
child process of a traced test run (a gloo rank, a CLI subprocess) traces the package's
lines too (tools/mutants_trace.py), so the runner knows its tests run them."""

import os

if os.environ.get("MUTANTS_TRACE_CHILD") == "1":
    import mutants_trace

    mutants_trace.child_start()
