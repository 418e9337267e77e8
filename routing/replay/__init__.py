"""Replaying a request trace through the service in simulated time (issue 24).

`python manage.py replay` is a thin shell over these plain functions:

- `trace`: the Azure LLM inference trace format (TIMESTAMP,ContextTokens,GeneratedTokens);
- `deadlines`: the slack mix that gives each request a deadline;
- `database`: the throwaway database the replay runs on (the real schema, migrated);
- `world`: the replay's catalog, pools and accounts in that database;
- `policies`: what each compared policy asks the router for;
- `simulate`: the event loop (arrivals, the worker's claims and finishes) that drives the
  production code (job_submit, route, job_claim, job_finish) with explicit times;
- `report`: the figures (attainment, calibration, cost, the cost floor, pool use), their
  JSON, table and chart.
"""
