"""The project's Pulumi policy pack: the checks that stop expensive or leaky TPU training setups
before anything is created, run by the Pulumi CLI (`pulumi preview --policy-pack policies`) and
offline by `policies.evaluate` (no engine, no cloud credentials).

Rules live in `policies.rules`, one module per concern; `__main__.py` only serves the pack.
"""
