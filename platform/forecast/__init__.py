"""What an engine's steps cost, and when a request would get its first token: the one
load model that admission, the router, the SLO loop's fallback rule and the capacity
planner all read.

    costs.py        StepCosts: a step's time from its size, fitted on the worker from the
                    engine's own steps (worker/profile.py) and sent in its heartbeat
    first_token.py  first_token_s: the engine's schedule stepped forward with those
                    costs, from what is in it now, to a new request's first token

Both are pure: plain data in, plain data out.
"""
