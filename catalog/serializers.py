from __future__ import annotations

import datetime as dt

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers
from rest_framework.reverse import reverse

from catalog.lifecycle import STATUSES, model_status, resolve_successor
from catalog.models import Benchmark, Deployment, ModelVersion, Price, PublishedSpeed, Tier


class TierSerializer(serializers.ModelSerializer):
    id = serializers.CharField(source="slug")
    price_multiplier = serializers.FloatField()

    class Meta:
        model = Tier
        fields = ["id", "name", "rank", "price_multiplier", "speed_vs_standard", "description"]


class TierListSerializer(serializers.Serializer):
    """GET /api/v1/tiers/: every tier, in one list (not paged)."""

    object = serializers.ChoiceField(choices=["list"])
    data = TierSerializer(many=True)


class ModelSummarySerializer(serializers.ModelSerializer):
    """One item of GET /api/v1/models/ (OpenAI list item shape plus lifecycle)."""

    id = serializers.CharField(source="slug")
    object = serializers.SerializerMethodField()
    family = serializers.CharField(source="family.slug")
    status = serializers.SerializerMethodField()
    shutdown_date = serializers.DateField(source="retires_on", allow_null=True)
    successor = serializers.SlugRelatedField(slug_field="slug", read_only=True, allow_null=True)
    successor_tier = serializers.SlugRelatedField(
        slug_field="slug", read_only=True, allow_null=True
    )
    created = serializers.SerializerMethodField()
    owned_by = serializers.CharField(source="vendor")
    url = serializers.SerializerMethodField()

    class Meta:
        model = ModelVersion
        fields = [
            "id",
            "object",
            "slug",
            "name",
            "vendor",
            "owned_by",
            "family",
            "kind",
            "status",
            "released_on",
            "retirement_announced_on",
            "retires_on",
            "shutdown_date",
            "successor",
            "successor_tier",
            "created",
            "url",
        ]

    def get_object(self, obj) -> str:
        return "model"

    @extend_schema_field(serializers.ChoiceField(choices=STATUSES))
    def get_status(self, obj) -> str:
        return model_status(obj, self.context.get("now"))

    def get_created(self, obj) -> int:
        return int(dt.datetime.combine(obj.released_on, dt.time.min, tzinfo=dt.UTC).timestamp())

    def get_url(self, obj) -> str:
        return reverse("model-detail", args=[obj.slug], request=self.context.get("request"))


class PriceSerializer(serializers.ModelSerializer):
    input_per_million = serializers.FloatField()
    output_per_million = serializers.FloatField()

    class Meta:
        model = Price
        fields = ["input_per_million", "output_per_million", "is_estimate"]


class BenchmarkSerializer(serializers.ModelSerializer):
    class Meta:
        model = Benchmark
        fields = ["name", "score", "duration_minutes", "source"]


class PublishedSpeedSerializer(serializers.ModelSerializer):
    tier = serializers.CharField(source="tier.slug")

    class Meta:
        model = PublishedSpeed
        fields = ["tier", "tokens_per_second_low", "tokens_per_second_high", "note"]


class ModelTierSerializer(serializers.Serializer):
    tier = serializers.CharField()
    name = serializers.CharField()
    pool = serializers.CharField()
    device = serializers.CharField()
    nodes = serializers.IntegerField()
    available_from = serializers.DateField(allow_null=True)
    price = PriceSerializer(allow_null=True)


class ResolvedSuccessorSerializer(serializers.Serializer):
    model = serializers.CharField()
    tier = serializers.CharField(allow_null=True)
    chain = serializers.ListField(child=serializers.CharField())


class ArchitectureSerializer(serializers.Serializer):
    total_params = serializers.IntegerField()
    active_params_prefill = serializers.IntegerField()
    active_params_decode = serializers.IntegerField()
    layers = serializers.IntegerField()
    hidden_size = serializers.IntegerField()
    bytes_per_param = serializers.FloatField()
    kv_bytes_per_token = serializers.IntegerField()
    is_estimate = serializers.BooleanField()


class ModelDetailSerializer(ModelSummarySerializer):
    resolved_successor = serializers.SerializerMethodField()
    tiers = serializers.SerializerMethodField()
    architecture = serializers.SerializerMethodField()
    benchmarks = BenchmarkSerializer(many=True, read_only=True)
    published_speeds = PublishedSpeedSerializer(source="speeds", many=True, read_only=True)

    class Meta(ModelSummarySerializer.Meta):
        fields = [
            *ModelSummarySerializer.Meta.fields,
            "generally_available_on",
            "resolved_successor",
            "context_window",
            "input_modalities",
            "tiers",
            "architecture",
            "benchmarks",
            "published_speeds",
            "estimated_fields",
            "notes",
        ]

    @extend_schema_field(ResolvedSuccessorSerializer(allow_null=True))
    def get_resolved_successor(self, obj):
        if obj.successor_id is None:
            return None
        res = resolve_successor(obj, self.context.get("now"))
        return {
            "model": res.model.slug,
            "tier": res.tier.slug if res.tier else None,
            "chain": [m.slug for m in res.chain],
        }

    @extend_schema_field(ModelTierSerializer(many=True))
    def get_tiers(self, obj):
        prices = {p.tier_id: p for p in obj.prices.all()}
        rows = []
        for d in obj.deployments.all():
            rows.append(
                {
                    "tier": d.tier.slug,
                    "name": d.tier.name,
                    "pool": d.pool.slug,
                    "device": d.pool.device,
                    "nodes": d.pool.nodes,
                    "available_from": d.available_from,
                    "price": prices.get(d.tier_id),
                }
            )
        return ModelTierSerializer(rows, many=True).data

    @extend_schema_field(ArchitectureSerializer)
    def get_architecture(self, obj):
        return ArchitectureSerializer(
            {
                "total_params": obj.total_params,
                "active_params_prefill": obj.active_params_prefill,
                "active_params_decode": obj.active_params_decode,
                "layers": obj.layers,
                "hidden_size": obj.hidden_size,
                "bytes_per_param": obj.bytes_per_param,
                "kv_bytes_per_token": obj.kv_bytes_per_token,
                "is_estimate": obj.architecture_is_estimate,
            }
        ).data


def deployments_prefetch():
    from django.db.models import Prefetch

    return Prefetch(
        "deployments",
        queryset=Deployment.objects.select_related("tier", "pool").order_by("tier__rank"),
    )
