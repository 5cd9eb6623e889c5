"""The commit protocol: exactly-once output whoever runs the job.

- ``output``: a batch's output staged, then shown by an atomic rename (re-exported here);
- ``parquet``: Parquet footers made byte-identical, so that a redone batch writes the same bytes;
- ``stream_commit``: a micro-batch's fenced commit record, then its rename; the log compacts;
- ``spark_checkpoint``: each term's own copy of Spark's checkpoint, repaired where a killed
  driver left it half-written.
"""

from __future__ import annotations

from .output import (
    STAGING,
    batch_dir,
    clean_staging,
    commit_batch,
    committed_batches,
    deterministic_layout,
    files_digest,
    is_output_entry,
    output_digest,
    output_files,
    read_output,
    stage_batch,
    write_batch,
)

__all__ = (
    "STAGING",
    "batch_dir",
    "clean_staging",
    "commit_batch",
    "committed_batches",
    "deterministic_layout",
    "files_digest",
    "is_output_entry",
    "output_digest",
    "output_files",
    "read_output",
    "stage_batch",
    "write_batch",
)
