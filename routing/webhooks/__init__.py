"""Signed webhooks for every event (issue 27): endpoints and their secrets
(routing.webhooks.endpoints), events emitted in the transaction of what they tell
(routing.webhooks.events), deliveries signed by the Standard Webhooks scheme with
retries and a log (routing.webhooks.delivery)."""
