"""``idcontrol sweep SPEC.toml``: a grid of closed-loop runs, on a local process pool or on a Ray cluster.

* :mod:`~idcontrol.tools.sweep.spec`: the spec file and the cells of its grid;
* :mod:`~idcontrol.tools.sweep.cell`: one cell, an in-process closed-loop run with the test harness's runner
  (:func:`idcontrol.testing.run_in_process`), and its metrics;
* :mod:`~idcontrol.tools.sweep.engine`: where cells run: in this process, a local process pool, or Ray tasks;
* :mod:`~idcontrol.tools.sweep.results`: the results file (JSON or Parquet, resumable) and the Markdown report.
"""
