"""The control plane: what is deployed, who may use it, and what happened, in the
database (SQLite embedded, PostgreSQL in production; schema changes through Alembic).

One folder per domain (versions, deployments, access, audit, webhooks, replicas), each
with its tables, its repository (SQL only), its service (the rules) and the plain
records the service hands out; services never hand out ORM rows. Beside them: db.py
(engine, sessions, the one declarative Base, the repository and service bases),
migrate.py, names.py, specs.py (the serving view the gateway and workers read) and
plane.py (the services composed, and the start-up writes that span domains).
"""
