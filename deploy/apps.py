from django.contrib.admin.apps import AdminConfig as DjangoAdminConfig


class AdminConfig(DjangoAdminConfig):
    """Django's admin with the staff two-factor site (routing/staffauth.py) as admin.site."""

    default_site = "routing.staffauth.StaffAdminSite"
