"""The worker image the Ray cluster runs: an Artifact Registry repository and a Cloud Build of
trainer/Dockerfile into it, re-run only when the image's content tag changes.

The GKE nodes need nothing more to pull it: their service account already holds
`roles/artifactregistry.reader` on the project (see `GkeCluster`), which covers this repository.
"""

from __future__ import annotations

from pathlib import Path

import pulumi
import pulumi_command as command
import pulumi_gcp as gcp

from domain import worker_image
from domain.settings import StackSettings
from infra.components.apis import ProjectApis


class WorkerImage(pulumi.ComponentResource):
    # The pushed image's URI, `REGION-docker.pkg.dev/PROJECT/REPO/maxtext-ray:TAG`.
    image: pulumi.Output[str]

    def __init__(
        self,
        name: str,
        settings: StackSettings,
        apis: ProjectApis,
        source_dir: Path,
        opts: pulumi.ResourceOptions | None = None,
    ):
        super().__init__("maxtext-tpu:image:WorkerImage", name, None, opts)
        repository = gcp.artifactregistry.Repository(
            f"{name}-repository",
            **worker_image.repository_args(settings),
            opts=pulumi.ResourceOptions(parent=self, depends_on=[apis]),
        )
        uri = worker_image.image_uri(settings, worker_image.content_tag(source_dir))
        build = command.local.Command(
            f"{name}-build",
            create=worker_image.build_script(settings, uri),
            dir=str(source_dir),
            interpreter=["/bin/sh", "-c"],
            # A new tag means new sources: build again. gcloud authenticates with the operator's
            # own login when it runs; no credential is passed in, so none reaches the state.
            triggers=[uri],
            opts=pulumi.ResourceOptions(parent=self, depends_on=[apis, repository]),
        )
        # Known from preview on (the tag comes from the sources), yet carrying the build as a
        # dependency, so whatever runs the image waits for its push.
        self.image = build.urn.apply(lambda _: uri)
        self.register_outputs({"image": self.image})
