"""The capacity planner: from a deployment's measured rates and a target load, how many
workers it needs, what time to first token and tokens/s they would give, and which
resource runs out first.

    rates.py     what one worker measured (its step costs, KV blocks, batch slots), as
                 the model reads it
    load.py      the target load: requests/s and length distributions
    simulate.py  one worker under that load: a seeded discrete-event simulation of
                 continuous batching with the measured step costs
    planner.py   the search: the most requests/s one worker sustains within the SLO, the
                 workers needed, the prediction at that count, the binding resource
    measured.py  the rates of a running deployment, from its workers' heartbeats
    service.py   the rules around a plan (which rates and SLO, refused loads), one at a time
    command.py   `vigil plan`, a client of POST /api/admin/plan

rates, load, simulate and planner are pure: plain data in, plain data out.
"""
