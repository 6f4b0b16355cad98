"""The worker image the Ray cluster runs: an Artifact Registry repository and a Cloud Build of
trainer/Dockerfile into it, re-run only when the image's content tag changes.

The GKE nodes need nothing more to pull it: their service account already holds
`roles/artifactregistry.reader` on the project (see `GkeCluster`), which covers this repository.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pulumi
import pulumi_command as command
import pulumi_gcp as gcp

from domain.resources import worker_image
from domain.stack_settings import StackSettings
from infra.components import child_options


@dataclass(frozen=True)
class WorkerImageArgs:
    repository: Mapping[str, Any]
    # `REGION-docker.pkg.dev/PROJECT/REPO/maxtext-ray:TAG`, TAG from the image's sources.
    uri: str
    build_script: str
    # The build context: the repository root (domain/, trainer/, the trainer lock).
    source_dir: Path

    @classmethod
    def from_settings(cls, settings: StackSettings, source_dir: Path) -> WorkerImageArgs:
        uri = worker_image.image_uri(settings, worker_image.content_tag(source_dir))
        return cls(
            repository=worker_image.repository_args(settings),
            uri=uri,
            build_script=worker_image.build_script(settings, uri),
            source_dir=source_dir,
        )


class WorkerImage(pulumi.ComponentResource):
    # The pushed image's URI.
    image: pulumi.Output[str]

    def __init__(self, name: str, args: WorkerImageArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("maxtext-tpu:image:WorkerImage", name, None, opts)
        child = child_options(self, opts)
        repository = gcp.artifactregistry.Repository(f"{name}-repository", **args.repository, opts=child)
        build = command.local.Command(
            f"{name}-build",
            create=args.build_script,
            dir=str(args.source_dir),
            interpreter=["/bin/sh", "-c"],
            # A new tag means new sources: build again. gcloud authenticates with the operator's
            # own login when it runs; no credential is passed in, so none reaches the state.
            triggers=[args.uri],
            opts=pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(depends_on=[repository])),
        )
        # Known from preview on (the tag comes from the sources), yet carrying the build as a
        # dependency, so whatever runs the image waits for its push.
        self.image = build.urn.apply(lambda _: args.uri)
        self.register_outputs({"image": self.image})
