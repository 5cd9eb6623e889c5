"""The peer of the streaming recovery benchmark: what a user runs today, a plain PySpark
Structured Streaming script (no ``ha``), restarted by a supervisor when it dies.

    python plain_stream.py INPUT OUTPUT CHECKPOINT [--interval 1.0]

It counts each user's actions in new JSON-lines files of INPUT (one file per micro-batch), as
``events.count`` does, and writes micro-batch N to OUTPUT/batch-0000N through ``foreachBatch``
(overwritten when redone, so a restart from CHECKPOINT repeats a batch harmlessly). After each
written batch it prints ``{"event": "batch_written", "batch": N, "t": <unix time>}``.

The session gets the settings ``ha``'s job manager uses (``ha.pipeline.spark.SparkSettings``:
no UI, 4 shuffle partitions, a JVM tuned to start fast), so both pay the same per batch and
per start. A killed Python driver takes its JVM along: PySpark's gateway exits when its stdin,
a pipe from this process, closes.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

SCHEMA = "user BIGINT, ts BIGINT, action STRING"
CONF = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "4",
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.adaptive.enabled": "true",
    "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC",
}


# Events go to a private copy of stdout: the JVM inherits fd 1 (pointed at stderr below), so
# the supervisor's pipe closes when this process dies, not when its JVM does.
EVENTS = os.fdopen(os.dup(1), "w")
os.dup2(2, 1)


def say(event: str, **fields: Any) -> None:
    EVENTS.write(json.dumps({"event": event, "t": time.time(), **fields}) + "\n")
    EVENTS.flush()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("input")
    parser.add_argument("output")
    parser.add_argument("checkpoint")
    parser.add_argument("--interval", type=float, default=1.0)
    args = parser.parse_args()

    builder = SparkSession.builder.master("local[2]").appName("plain-stream")
    for key, value in CONF.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    say("session")

    def write(batch: DataFrame, batch_id: int) -> None:
        counts = batch.groupBy("user", "action").agg(
            F.count(F.lit(1)).alias("events"),
            F.min("ts").alias("first_ts"),
            F.max("ts").alias("last_ts"),
        )
        target = f"{args.output}/batch-{batch_id:05d}"
        counts.repartition(1).sortWithinPartitions("user", "action").write.mode(
            "overwrite"
        ).parquet(target)
        say("batch_written", batch=batch_id)

    query = (
        spark.readStream.schema(SCHEMA)
        .option("maxFilesPerTrigger", 1)
        .json(args.input)
        .writeStream.foreachBatch(write)
        .option("checkpointLocation", args.checkpoint)
        .trigger(processingTime=f"{args.interval} seconds")
        .start()
    )
    say("started")
    query.awaitTermination()


if __name__ == "__main__":
    main()
