"""Reading the services' metrics the way Prometheus does: from the scrape text."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from lectern_common.settings import BaseServiceSettings
from lectern_common.telemetry import prometheus_scrape, setup_telemetry


def install_telemetry() -> None:
    """Install the process' meter and tracer providers unless a service already did."""
    setup_telemetry(BaseServiceSettings(service_name="lectern-tests"))


def sample_total(scrape: str, name: str, **labels: str) -> float:
    """The sum of the samples called ``name`` in a scrape whose labels include ``labels``."""
    total = 0.0
    for family in text_string_to_metric_families(scrape):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                total += sample.value
    return total


def local_total(name: str, **labels: str) -> float:
    """``sample_total`` over this process' own scrape (services hosted in the test process)."""
    body, _ = prometheus_scrape()
    return sample_total(body.decode(), name, **labels)
