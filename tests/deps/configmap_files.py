"""Lays out the files a pod of the rendered Deployment sees under /etc/poppy-gateway, from the
ConfigMaps and volumeMounts of a Kubernetes manifest (`kubectl kustomize deploy/kubernetes`),
the way the kubelet mounts them: a subPath mount is one file; a whole-ConfigMap mount is a
folder of `..<timestamp>/KEY` files, a `..data` link to it and a `KEY -> ..data/KEY` link per
key (or only the listed `items`). tests/tests/deploy.rs then runs `poppy-gateway check`.

    python configmap_files.py MANIFEST.yaml OUT_DIR [--add KEY=FILE]...

`--add` puts one more key into the ConfigMap mounted at policies/, as an operator editing it.
Prints each file laid out, relative to OUT_DIR.
"""
import os
import sys

import yaml

ROOT = "/etc/poppy-gateway"


def mount_folder(folder, data, items):
    """A ConfigMap volume: the kubelet's atomic-writer layout."""
    stamped = os.path.join(folder, "..2026_01_01_00_00_00.000000001")
    os.makedirs(stamped)
    os.symlink(os.path.basename(stamped), os.path.join(folder, "..data"))
    paths = {i["key"]: i["path"] for i in items} if items else {k: k for k in data}
    for key, path in paths.items():
        with open(os.path.join(stamped, path), "w") as f:
            f.write(data[key])
        os.symlink(os.path.join("..data", path), os.path.join(folder, path))
        yield path


def main(manifest, out, added):
    with open(manifest) as f:
        docs = [d for d in yaml.safe_load_all(f) if d]
    configmaps = {d["metadata"]["name"]: d.get("data") or {} for d in docs if d["kind"] == "ConfigMap"}
    (deployment,) = [d for d in docs if d["kind"] == "Deployment"]
    pod = deployment["spec"]["template"]["spec"]
    volumes = {v["name"]: v["configMap"] for v in pod["volumes"] if "configMap" in v}
    (container,) = pod["containers"]
    for mount in container["volumeMounts"]:
        source = volumes[mount["name"]]
        data = configmaps[source["name"]]
        relative = os.path.relpath(mount["mountPath"], ROOT)
        target = os.path.join(out, relative)
        if "subPath" in mount:
            os.makedirs(os.path.dirname(target), exist_ok=True)
            with open(target, "w") as f:
                f.write(data[mount["subPath"]])
            print(relative)
            continue
        if relative == "policies":
            for key, path in added:
                with open(path) as f:
                    data[key] = f.read()
        os.makedirs(target)
        for path in mount_folder(target, data, source.get("items")):
            print(os.path.join(relative, path))


if __name__ == "__main__":
    args = sys.argv[1:]
    extra = []
    while "--add" in args:
        i = args.index("--add")
        key, _, path = args[i + 1].partition("=")
        extra.append((key, path))
        del args[i : i + 2]
    main(args[0], args[1], extra)
