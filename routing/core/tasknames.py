"""Every Celery task's name, written once: the task decorators (routing/tasks/), the
services that send them by name (routing.core.dispatch) and the settings' routes and
beat schedule (deploy/settings.py) import these. Nothing else here: the settings import
this module before the apps load."""

RUN_JOB = "routing.run_job"
FINISH_JOB = "routing.finish_job"
SWEEP_JOBS = "routing.sweep_jobs"
VALIDATE_BATCH = "routing.validate_batch"
ADVANCE_BATCH = "routing.advance_batch"
FINALIZE_BATCH = "routing.finalize_batch"
SWEEP_BATCHES = "routing.sweep_batches"
START_SCHEDULED_BATCH = "routing.start_scheduled_batch"
RESET_QUOTA_PERIODS = "routing.reset_quota_periods"
APPLY_RETIREMENTS = "routing.apply_retirements"
ANNOUNCE_NOTICES = "routing.announce_notices"
DELIVER_NOTICE = "routing.deliver_notice"
EXPIRE_FILES = "routing.expire_files"
RECONCILE_OCCUPANCY = "routing.reconcile_occupancy"
DELIVER_WEBHOOK = "routing.deliver_webhook"
SWEEP_WEBHOOKS = "routing.sweep_webhooks"
