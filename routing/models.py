# Accounts, API keys, quota packages, jobs and batches arrive with issues 4-6.
