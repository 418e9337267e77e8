"""The `routing` app's models, one module per domain, re-exported here so that
`routing.models.X` (what migrations and the app registry import) stays valid."""

from routing.models.accounts import Account, ApiKey
from routing.models.batches import Batch, BatchRequest, BatchSchedule, File, _file_id, _file_path
from routing.models.jobs import Job, PoolLoad, PoolOccupancy
from routing.models.quota import CREDIT, LedgerEntry, QuotaPackage, QuotaReservation
from routing.models.retirement import Notice, RetirementApplication
from routing.models.webhooks import BudgetAlert, WebhookDelivery, WebhookEndpoint, WebhookEvent

__all__ = [
    "CREDIT",
    "Account",
    "ApiKey",
    "Batch",
    "BudgetAlert",
    "BatchRequest",
    "BatchSchedule",
    "File",
    "Job",
    "LedgerEntry",
    "Notice",
    "PoolLoad",
    "PoolOccupancy",
    "QuotaPackage",
    "QuotaReservation",
    "RetirementApplication",
    "WebhookDelivery",
    "WebhookEndpoint",
    "WebhookEvent",
    "_file_id",
    "_file_path",
]
