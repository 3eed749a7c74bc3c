"""Fetch the JVM jars Spark sessions of the tool load (delta-spark; Hadoop's S3A with
``--s3a``) and those of the remote tier's helper (Kafka's storage classes: it is compiled
against them here, :func:`compactor.remote.tier.build_helper`) from Maven Central into this
installation, once.

Usage: python -m compactor.tools.build.jars [--s3a] [--force] [--print]

``--print`` prints the delta-spark jars (with ``--s3a``, S3A's too: for a state dir on S3) as
spark-submit's ``--jars`` wants them (comma separated), fetching them first when needed:

    spark-submit --jars "$(python -m compactor.tools.build.jars --print)" jobs/erase.py apply ...

Maven resolves ``compactor/spark/pom.xml`` (pinned versions; what pyspark ships is excluded)
and copies the runtime jars into ``<prefix>/share/kafka-compactor/<profile>-<version>``
(``compactor.spark.delta.folder``), written under a temporary name and renamed when complete,
with a ``.fetched`` stamp. After that no session needs the network. Needs ``mvn``
(``make`` installs Debian's maven when it is missing).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys

from compactor.remote import tier
from compactor.spark import delta

MAVEN_TIMEOUT_S = 1800


def fetch(profile: str, *, force: bool = False) -> str:
    """The profile's folder, filled once; returns it.

    Raises:
        RuntimeError: mvn is missing or failed (its output in the message).
    """
    out = delta.folder(profile)
    if os.path.exists(os.path.join(out, ".fetched")) and not force:
        return out
    mvn = shutil.which("mvn")
    if mvn is None:
        raise RuntimeError("mvn is not installed (Debian: apt-get install maven)")
    partial = f"{out}.{os.getpid()}.partial"
    shutil.rmtree(partial, ignore_errors=True)
    done = subprocess.run(
        [mvn, "-q", "-B", "-f", delta.POM, f"-P{profile}", "dependency:copy-dependencies",
         "-DincludeScope=runtime", f"-DoutputDirectory={partial}"],
        capture_output=True, text=True, timeout=MAVEN_TIMEOUT_S, check=False)
    if done.returncode != 0:
        shutil.rmtree(partial, ignore_errors=True)
        raise RuntimeError(f"mvn failed ({done.returncode}): "
                           f"{(done.stdout + done.stderr).strip()[-2000:]}")
    open(os.path.join(partial, ".fetched"), "w").close()
    shutil.rmtree(out, ignore_errors=True)
    os.replace(partial, out)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m compactor.tools.build.jars",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("--s3a", action="store_true",
                    help="also Hadoop's S3A connector and the AWS SDK (690 MB), for a state "
                         "dir on S3")
    ap.add_argument("--force", action="store_true", help="fetch again")
    ap.add_argument("--print", action="store_true", dest="print_jars",
                    help="print the delta-spark jars, comma separated, for spark-submit --jars")
    args = ap.parse_args(argv)
    for profile in ("delta", "tier", "s3a") if args.s3a else ("delta", "tier"):
        try:
            out = fetch(profile, force=args.force)
        except (RuntimeError, OSError, subprocess.TimeoutExpired) as err:
            print(f"jars: {profile}: {err}", file=sys.stderr)
            return 1
        if profile == "tier":  # the remote tier's helper, compiled against them
            try:
                tier.build_helper(out)
            except (RuntimeError, OSError) as err:  # only remote tiers need it
                print(f"jars: tier: the remote tier's helper is not built ({err}): "
                      f"`erase verify` cannot read a broker's remote tier", file=sys.stderr)
        if not args.print_jars:
            print(f"jars: {profile}: {out} "
                  f"({sum(n.endswith('.jar') for n in os.listdir(out))} jars)")
    if args.print_jars:
        print(",".join(delta.jars("delta") + (delta.jars("s3a") if args.s3a else [])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
