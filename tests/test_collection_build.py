# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The collection tarball stands on its own: it builds, installs into an empty tree, documents itself
with ansible-doc, and an execution environment built from it gets its Python and system requirements."""

from __future__ import annotations

import glob
import shutil
import json
import os
import subprocess
import typing as t
import uuid

import pytest
import yaml

from repo_helpers import REPO, VENV_BIN

pytestmark = pytest.mark.slow  # ansible-galaxy, ansible-doc, ansible-builder and ansible-playbook runs (not in scripts/run-tests --quick)

COLLECTION = os.path.join(REPO, "collections", "ansible_collections", "backendai", "cluster")


def run(*cmd: str, cwd: str, env: t.Optional[t.Dict[str, str]] = None,
        timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run(list(cmd), cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


class Installed:
    """A tarball built from the repository and installed into an empty collections tree, with an
    environment that sees only that tree (no repository ansible.cfg, no repository collections path)."""

    def __init__(self, base: str) -> None:
        self.base = base
        self.dist = os.path.join(base, "dist")
        self.dest = os.path.join(base, "installed")
        self.outside = os.path.join(base, "elsewhere")  # the user's working directory
        os.makedirs(self.outside)
        cfg = os.path.join(base, "ansible.cfg")
        with open(cfg, "w", encoding="utf-8") as f:
            f.write("[defaults]\n")
        self.env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=self.dest, ANSIBLE_CONFIG=cfg, ANSIBLE_NOCOLOR="1",
                        PATH=VENV_BIN + os.pathsep + os.environ.get("PATH", ""))
        built = run(os.path.join(VENV_BIN, "ansible-galaxy"), "collection", "build", "--output-path", self.dist,
                    COLLECTION, cwd=base, env=self.env)
        assert built.returncode == 0, built.stdout + built.stderr
        (self.tarball,) = glob.glob(os.path.join(self.dist, "backendai-cluster-*.tar.gz"))
        installed = run(os.path.join(VENV_BIN, "ansible-galaxy"), "collection", "install", "--offline", "-p",
                        self.dest, self.tarball, cwd=base, env=self.env)
        assert installed.returncode == 0, installed.stdout + installed.stderr
        self.root = os.path.join(self.dest, "ansible_collections", "backendai", "cluster")

    def listing(self) -> t.List[str]:
        return run("tar", "tzf", self.tarball, cwd=self.base).stdout.splitlines()

    def tool(self, name: str, *args: str, timeout: int = 300) -> subprocess.CompletedProcess:
        return run(os.path.join(VENV_BIN, name), *args, cwd=self.outside, env=self.env, timeout=timeout)


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    return Installed(str(tmp_path_factory.mktemp("collection")))


def test_build_install_and_load(installed: Installed) -> None:
    listing = installed.listing()
    assert "plugins/modules/session.py" in listing and "meta/runtime.yml" in listing
    assert {"meta/execution-environment.yml", "requirements.txt", "bindep.txt", "CHANGELOG.rst"} <= set(listing)
    assert not [n for n in listing if n.startswith("tests/output") or "__pycache__" in n]
    assert os.path.isfile(os.path.join(installed.root, "MANIFEST.json"))
    doc = installed.tool("ansible-doc", "-t", "module", "backendai.cluster.session")
    assert doc.returncode == 0 and installed.dest in doc.stdout, doc.stderr


def spec_keys(schema: t.Mapping[str, t.Any]) -> t.Iterator[str]:
    for key, entry in schema.items():
        yield key
        yield from spec_keys(entry.get("suboptions", {}))


def test_ansible_doc_shows_every_spec_key_from_the_install(installed: Installed) -> None:
    from ansible_collections.backendai.cluster.plugins.module_utils._session.schema import SCHEMA

    doc = installed.tool("ansible-doc", "backendai.cluster.session")
    assert doc.returncode == 0 and "WARNING" not in doc.stderr, doc.stderr
    assert "repository README" not in doc.stdout
    shown = set(word.rstrip(":") for line in doc.stdout.splitlines() for word in line.split()[:2])
    assert set(spec_keys(SCHEMA)) <= shown, set(spec_keys(SCHEMA)) - shown


def test_execution_environment_build_context_gets_the_requirements(installed: Installed) -> None:
    """ansible-builder create (no container engine runs) makes a context whose build installs the tarball,
    and the introspection that context runs in its builder stage finds the collection's requirements."""
    tarball = os.path.basename(installed.tarball)
    ee_dir = os.path.join(installed.base, "ee")
    os.makedirs(ee_dir)
    os.link(installed.tarball, os.path.join(ee_dir, tarball))
    definition = {
        "version": 3,
        "images": {"base_image": {"name": "quay.io/ansible/awx-ee:latest"}},
        "dependencies": {"galaxy": {"collections": [{"name": "collections/" + tarball, "type": "file"}]}},
        "additional_build_files": [{"src": tarball, "dest": "collections"}],
    }
    with open(os.path.join(ee_dir, "execution-environment.yml"), "w", encoding="utf-8") as f:
        yaml.safe_dump(definition, f)
    created = run(os.path.join(VENV_BIN, "ansible-builder"), "create", "-f", "execution-environment.yml",
                  "-c", "context", cwd=ee_dir, env=installed.env)
    assert created.returncode == 0, created.stdout + created.stderr
    build = os.path.join(ee_dir, "context", "_build")
    with open(os.path.join(build, "requirements.yml"), encoding="utf-8") as f:
        assert yaml.safe_load(f)["collections"][0]["name"] == "collections/" + tarball
    assert os.path.isfile(os.path.join(build, "collections", tarball))
    # ansible-builder names it for the container runtime it finds: Containerfile where podman is installed
    names = [n for n in ("Containerfile", "Dockerfile") if os.path.isfile(os.path.join(ee_dir, "context", n))]
    assert len(names) == 1, os.listdir(os.path.join(ee_dir, "context"))
    with open(os.path.join(ee_dir, "context", names[0]), encoding="utf-8") as f:
        dockerfile = f.read()
    assert "introspect.py introspect" in dockerfile and "collection install" in dockerfile
    # What the builder stage does after installing the tarball, run on the same install here.
    pip, bindep = os.path.join(ee_dir, "pip.txt"), os.path.join(ee_dir, "bindep.txt")
    found = run(os.path.join(VENV_BIN, "python"), os.path.join(build, "scripts", "introspect.py"), "introspect",
                "--write-pip", pip, "--write-bindep", bindep, installed.dest, cwd=ee_dir, env=installed.env)
    assert found.returncode == 0, found.stdout + found.stderr
    with open(pip, encoding="utf-8") as f:
        python = [line.split()[0] for line in f if line.strip()]
    assert [p.split(">")[0] for p in python] == ["python-nomad", "hvac", "cryptography"], python
    assert not [p for p in python if "jsonschema" in p]
    with open(bindep, encoding="utf-8") as f:
        system = f.read()
    assert "containernetworking-plugins [local]" in system and "openssh-server [local]" in system
    # The default profile (what an EE installs) holds none of them: local sessions do not run in an EE.
    listed = run(os.path.join(VENV_BIN, "bindep"), "-f", bindep, "-l", "newline", cwd=ee_dir)
    assert listed.stdout.strip() == "", listed.stdout + listed.stderr


def _local_reason() -> t.Optional[str]:
    if os.geteuid() != 0 or not os.path.exists("/usr/lib/cni/bridge"):
        return "the local backend needs root and the CNI plugins (scripts/setup)"
    return None


@pytest.mark.machine
@pytest.mark.skipif(_local_reason() is not None, reason=str(_local_reason()))
def test_the_walk_through_runs_from_the_install_outside_the_repository(installed: Installed) -> None:
    """ansible-playbook backendai.cluster.create_session with an example from the installed collection,
    from a directory that is not the repository (local backend), then session_status and destroy."""
    example = os.path.join(installed.root, "examples", "single-node.yml")
    assert os.path.isfile(example) and os.path.isfile(os.path.join(installed.root, "examples", "agents.yml"))
    state = os.path.join(installed.base, "state")
    name = "tarball-" + uuid.uuid4().hex[:6]
    spec = "{\"session\": %s}" % json.dumps(dict(_example_session(example), name=name))
    common = ["-e", "session_state_dir=" + state]
    try:
        created = installed.tool("ansible-playbook", "backendai.cluster.create_session", "-e", "@" + example,
                                 "-e", spec, *common, timeout=600)
        assert created.returncode == 0, created.stdout[-3000:] + created.stderr[-2000:]
        status = installed.tool("ansible-playbook", "backendai.cluster.session_status", "-e", "session_name=" + name,
                                *common)
        assert status.returncode == 0 and "RUNNING" in status.stdout, status.stdout[-2000:]
        rendered = installed.tool("ansible-playbook", "backendai.cluster.render_session", "-e", "@" + example,
                                  "-e", "@" + os.path.join(installed.root, "examples", "agents.yml"))
        assert rendered.returncode == 0, rendered.stdout[-2000:]
        assert os.path.isfile(os.path.join(installed.outside, "out", "example-single.nomad.hcl"))
    finally:
        destroyed = installed.tool("ansible-playbook", "backendai.cluster.destroy_session", "-e", "session_name=" + name,
                                   *common, timeout=600)
    assert destroyed.returncode == 0, destroyed.stdout[-3000:]
    assert not os.path.exists(os.path.join(state, name))
    assert not os.path.exists(os.path.join(installed.root, "out"))  # nothing written into the collection


def _example_session(path: str) -> t.Dict[str, t.Any]:
    with open(path, encoding="utf-8") as f:
        return yaml.safe_load(f)["session"]


def test_galaxy_importer_accepts_the_tarball(installed: Installed) -> None:
    """galaxy-importer's offline checks (metadata, docs of every plugin, ansible-lint; not ansible-test,
    which needs a container) on the built tarball.

    galaxy.yml has no repository URL until the project has a public home, and the importer requires
    one: the test asserts that this is its only objection, then imports a copy that names a
    placeholder repository, which must pass every other check."""
    cfg = os.path.join(installed.base, "galaxy-importer.cfg")
    with open(cfg, "w", encoding="utf-8") as f:
        f.write("[galaxy-importer]\nRUN_ANSIBLE_TEST = False\nRUN_ANSIBLE_LINT = True\n")
    env = dict(installed.env, GALAXY_IMPORTER_CONFIG=cfg)

    def importer(tarball: str) -> subprocess.CompletedProcess:
        return run(os.path.join(VENV_BIN, "python"), "-m", "galaxy_importer.main", tarball, cwd=os.path.dirname(tarball),
                   env=env, timeout=900)

    with open(os.path.join(COLLECTION, "galaxy.yml"), encoding="utf-8") as f:
        galaxy = yaml.safe_load(f)
    tarball = installed.tarball
    if not galaxy.get("repository"):
        refused = importer(tarball)
        assert refused.returncode != 0
        assert "Invalid collection metadata. 'repository' is required" in refused.stdout + refused.stderr
        copy = os.path.join(installed.base, "with-repository", "cluster")
        shutil.copytree(COLLECTION, copy, ignore=shutil.ignore_patterns("__pycache__", "output"))
        with open(os.path.join(copy, "galaxy.yml"), "a", encoding="utf-8") as f:
            f.write("repository: https://example.org/placeholder/backendai-cluster\n")
        built = run(os.path.join(VENV_BIN, "ansible-galaxy"), "collection", "build", "--output-path",
                    os.path.dirname(copy), copy, cwd=installed.base, env=installed.env)
        assert built.returncode == 0, built.stdout + built.stderr
        (tarball,) = glob.glob(os.path.join(os.path.dirname(copy), "backendai-cluster-*.tar.gz"))
    imported = importer(tarball)
    output = imported.stdout + imported.stderr
    assert imported.returncode == 0 and "Importer processing completed successfully" in output, output[-3000:]
    assert not [line for line in output.splitlines() if "WARNING" in line or "ERROR" in line], output[-3000:]
