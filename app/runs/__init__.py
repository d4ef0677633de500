"""A run's lifecycle: from a job file to settled decisions, durably.

    settings.py   what a new run reads with, which engine reads it, where (from ``DREADS_*``
                  and flags, at the entry points)
    env.py        RunEnv: the ``DREADS_*`` settings read here, frozen by the entry point
    read_options.py  the read settings a user may give, declared once (option, API name,
                  bounds, help)
    submission.py  the one submission path of ``submit``, ``run`` and ``POST /v1/runs``
    jobfile.py    a job file's lines: each a decision or a bad line with its reason
    submit.py     submit: validate, write the run and its decisions batch by batch, publish
    submit_images.py  submit's images: each fetched and checked once, or the decision rejected
    changed.py    lines whose id the run holds: a repeat, the same content, or a change
    dryrun.py     --dry-run: validate and plan a job file; its reads, tokens and cost; no I/O
    probe.py      is this server the run's? its fingerprint and a read at the canvas width
    chunk.py      run a chunk: claim, answer each decision, commit as each ends
    commit.py     group commit: the decisions that finish together, in one transaction
    answer.py     who answers a decision: dreads' reads or a decision endpoint (its source
                  from ``app.engine.sources``)
    endpoint_images.py  what a request to a decision endpoint carries for a decision's images
    budget.py     spend recorded with each commit; the budget that pauses a run
    breaker.py    the breaker: a run whose recent attempts keep failing one way pauses
    sweep.py      the sweeper: expired leases back, what has no live message re-published
    unpublish.py  the rows of a publish the broker refused back to pending
    embedded.py   the embedded executor: a run driven in this process (SQLite, no broker)
    resume.py     resume: the checks every caller shares, then a sweep or the executor
    reports.py    what a sweep and a resume did (plain values)
    refusals.py   what a cancelled run refuses, in one set of words for every entry point
    setting_names.py  each run setting's option and API parameter: mismatches
                  worded as the user typed them
    sources.py    a run's own files (job files, answer keys): never written over

The SQL is in ``app.store``, the broker in ``app.broker``, the model behind ``app.upstream``;
the pure decision logic in ``app.engine``. Nothing here reads the environment: the entry
points (``app.cli``, ``app.api``, ``workers``) read ``Settings`` and pass values down.
"""
