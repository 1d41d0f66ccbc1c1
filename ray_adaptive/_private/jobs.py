"""The GCS job table: which Ray jobs are alive, and the metadata each was submitted with (private Ray API, kept here alone).

Ray's public job APIs (``JobSubmissionClient``, ``ray.util.state.list_jobs``)
go through the dashboard, which a cluster may run without
(``include_dashboard=False``) and which a detached actor would have to find
by address; the GCS accessor every connected process already holds answers
both questions in one call, for every job, submitted through the job API or
started as a plain driver. A job submitted with ``ray job submit
--metadata-json`` carries that metadata in its job config (Ray's job
supervisor injects it into the driver's ``ray.init``), as does a driver's own
``ray.init(job_config=JobConfig(metadata=...))``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict

__all__ = ["JobRecord", "job_table"]


@dataclass(frozen=True)
class JobRecord:
    job_id: str  # hex, as ray.get_runtime_context().get_job_id() gives it
    dead: bool
    metadata: Dict[str, str]
    start_ms: int


def job_table() -> Dict[str, JobRecord]:
    """Every job the connected cluster's GCS knows, by job id (hex)."""
    from ray._private.state import state
    from ray.core.generated import gcs_pb2

    connect = getattr(state, "_connect_and_get_accessor", None)
    if connect is not None:  # Ray 2.60
        accessor = connect()
    else:  # older releases (2.50): the accessor made on first use, kept on the object
        state._check_connected()
        accessor = state.global_state_accessor
    out: Dict[str, JobRecord] = {}
    for raw in accessor.get_job_table(skip_submission_job_info_field=True, skip_is_running_tasks_field=True):
        entry = gcs_pb2.JobTableData.FromString(raw)
        job = entry.job_id.hex()
        out[job] = JobRecord(job, bool(entry.is_dead), dict(entry.config.metadata), int(entry.start_time))
    return out
