"""Writes each `data` key of the ConfigMaps in a Kubernetes manifest to a folder, the way a pod
mounts them: gateway.toml there, every other key under policies/. tests/tests/deploy.rs then
runs `poppy-gateway check` on them.

    python configmap_files.py MANIFEST.yaml OUT_DIR
"""
import os
import sys

import yaml


def main(manifest, out):
    os.makedirs(os.path.join(out, "policies"), exist_ok=True)
    with open(manifest) as f:
        for doc in yaml.safe_load_all(f):
            if not doc or doc.get("kind") != "ConfigMap":
                continue
            for key, text in (doc.get("data") or {}).items():
                folder = out if key == "gateway.toml" else os.path.join(out, "policies")
                with open(os.path.join(folder, key), "w") as target:
                    target.write(text)
                print(key)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
