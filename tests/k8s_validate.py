"""Offline checks for generated Kubernetes manifests (a test helper, not a test file).

Three layers, each catching what the one before cannot:

* `validate_builtin` -- the published OpenAPI schemas of built-in kinds (Job,
  Service, ...) via `kubernetes_validate` in strict mode: unknown fields, wrong
  types, missing required fields.
* `validate_crd` -- JobSet and Volcano documents against the `openAPIV3Schema`
  of their CustomResourceDefinitions (kept as data in `tests/data/k8s-crds`),
  via `jsonschema`.
* `check_semantics` -- what schemas do not say and the API server enforces in
  Go code: DNS names and their length limits, label syntax, resource
  quantities, Job restart policies, extended-resource requests, and the
  Indexed Job + headless Service pairing the Kubernetes backend relies on for
  `<job>-0.<service>` as the rank-0 host.

Heavy imports (kubernetes_validate, jsonschema, yaml) happen on first use.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from fractions import Fraction
from pathlib import Path
from typing import Any

__all__ = [
    "CRD_DIR",
    "check_semantics",
    "crd_dir",
    "parse_quantity",
    "validate_builtin",
    "validate_crd",
]

# Oldest version we promise to support: kubernetes_validate's <=1.28 schemas
# wrongly require `onPodConditions` in every podFailurePolicy rule.
MIN_VERSION = "1.29"

CRD_DIR = Path(__file__).resolve().parent / "data" / "k8s-crds"


# ------------------------------------------------------------------ built-in kinds


def _default_versions() -> tuple[str, ...]:
    from kubernetes_validate.utils import latest_version, major_minor

    return (MIN_VERSION, major_minor(latest_version()))


def validate_builtin(doc: Mapping[str, Any], versions: Sequence[str] | None = None) -> None:
    """Validate a built-in kind against its strict OpenAPI schema.

    Args:
        doc: one manifest, e.g. a batch/v1 Job.
        versions: Kubernetes minor versions to check; default
            `("1.29", <newest schema kubernetes_validate ships>)`.

    Raises:
        AssertionError: listing, per version, the first schema violation, or
            saying that no schema exists for the kind (a CRD: use
            `validate_crd`).
    """
    import kubernetes_validate
    from kubernetes_validate.utils import SchemaNotFoundError

    problems = []
    for version in versions or _default_versions():
        try:
            kubernetes_validate.validate(dict(doc), version, strict=True)
        except kubernetes_validate.ValidationError as e:
            where = "/".join(str(p) for p in e.path) or "<root>"
            problems.append(f"{version}: {where}: {e.message}")
        except SchemaNotFoundError as e:
            problems.append(f"{version}: {e.message} (a custom resource? use validate_crd)")
    if problems:
        raise AssertionError(f"{_describe(doc)} is invalid:\n  " + "\n  ".join(problems))


# ------------------------------------------------------------------ custom resources

# (apiVersion, kind) -> CRD file name: the CRDs the Kubernetes backend targets.
_CRDS = {
    ("jobset.x-k8s.io/v1alpha2", "JobSet"): "jobset.x-k8s.io_jobsets.yaml",
    ("batch.volcano.sh/v1alpha1", "Job"): "batch.volcano.sh_jobs.yaml",
}


def crd_dir() -> Path:
    """Where the CRD files are: `$DISTSPEC_K8S_CRDS`, else `tests/data/k8s-crds`."""
    return Path(os.environ.get("DISTSPEC_K8S_CRDS") or CRD_DIR)


def validate_crd(doc: Mapping[str, Any]) -> None:
    """Validate a JobSet (jobset.x-k8s.io/v1alpha2) or Volcano (batch.volcano.sh/v1alpha1) Job.

    The CRD's `openAPIV3Schema` is checked with jsonschema after the
    rewrites in `_to_json_schema`; CEL rules (`x-kubernetes-validations`) are
    not evaluated. Skips the calling test when the CRD files are absent.

    Raises:
        AssertionError: listing every violation, with its path.
    """
    key = (doc.get("apiVersion"), doc.get("kind"))
    if key not in _CRDS:
        known = ", ".join(f"{k} {v}" for v, k in _CRDS)
        raise AssertionError(f"{_describe(doc)}: not a known custom resource ({known})")
    path = crd_dir() / _CRDS[key]  # type: ignore[index]
    if not path.is_file():
        import pytest

        pytest.skip(f"CRD schema not found: {path} (set DISTSPEC_K8S_CRDS)")
    validator = _crd_validator(str(path), key[0], key[1])
    errors = sorted(validator.iter_errors(dict(doc)), key=lambda e: list(map(str, e.path)))
    if errors:
        lines = [f"{'/'.join(map(str, e.path)) or '<root>'}: {e.message}" for e in errors[:20]]
        if len(errors) > 20:
            lines.append(f"... and {len(errors) - 20} more")
        raise AssertionError(f"{_describe(doc)} is invalid:\n  " + "\n  ".join(lines))


@functools.cache
def _crd_validator(path: str, api_version: str, kind: str) -> Any:
    # Parsing the 820 KB JobSet CRD takes ~0.15 s with libyaml and ~2 s
    # without it, hence the per-process cache.
    import jsonschema
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    with open(path, encoding="utf-8") as f:
        crd = yaml.load(f, Loader=loader)
    group, version = api_version.split("/")
    if crd["spec"]["group"] != group or crd["spec"]["names"]["kind"] != kind:
        raise AssertionError(
            f"{path} defines {crd['spec']['names']['kind']}.{crd['spec']['group']}"
        )
    for v in crd["spec"]["versions"]:
        if v["name"] == version:
            schema = _to_json_schema(v["schema"]["openAPIV3Schema"])
            break
    else:
        raise AssertionError(f"{path} has no version {version}")
    # The API server fills in metadata itself; the CRD says only "object".
    schema["properties"]["metadata"] = {"type": "object"}
    schema["properties"]["apiVersion"] = {"const": api_version}
    schema["properties"]["kind"] = {"const": kind}
    schema["required"] = sorted({*schema.get("required", ()), "apiVersion", "kind", "spec"})
    cls = jsonschema.Draft7Validator
    cls.check_schema(schema)
    return cls(schema)


def _to_json_schema(node: Any) -> Any:
    """Turn a structural OpenAPI v3 schema into plain JSON Schema.

    * `x-kubernetes-int-or-string: true` -> integer or string;
    * `nullable: true` -> null is allowed as well;
    * `x-kubernetes-embedded-resource: true` -> apiVersion, kind and metadata
      are implied properties;
    * an object with `properties` and without
      `x-kubernetes-preserve-unknown-fields` forbids other keys (the API server
      would prune them silently; for a generator that is a bug).
    """
    if isinstance(node, list):
        return [_to_json_schema(n) for n in node]
    if not isinstance(node, dict):
        return node
    out = {k: _to_json_schema(v) for k, v in node.items() if k != "description"}
    if out.get("x-kubernetes-int-or-string"):
        out.pop("anyOf", None)
        out["type"] = ["integer", "string"]
    if out.get("x-kubernetes-embedded-resource"):
        props = out.setdefault("properties", {})
        props.setdefault("apiVersion", {"type": "string"})
        props.setdefault("kind", {"type": "string"})
        props.setdefault("metadata", {"type": "object"})
    if (
        "properties" in out
        and not out.get("x-kubernetes-preserve-unknown-fields")
        and "additionalProperties" not in out
    ):
        out["additionalProperties"] = False
    if out.get("nullable") and "type" in out:
        types = out["type"] if isinstance(out["type"], list) else [out["type"]]
        out["type"] = [*types, "null"]
    return out


# ------------------------------------------------------------------ semantics

_DNS1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_DNS1035_LABEL = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
_DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_LABEL_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
# k8s.io/apimachinery/pkg/api/resource: <signedNumber><suffix>, suffix one of
# binary SI (Ki..Ei), decimal SI (n u m "" k M G T P E) or a decimal exponent.
_QUANTITY = re.compile(
    r"(?P<num>[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))"
    r"(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?[0-9]+)?"
)
_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}


def _is_dns1123_label(s: str) -> bool:
    return len(s) <= 63 and _DNS1123_LABEL.fullmatch(s) is not None


def _is_dns1035_label(s: str) -> bool:
    return len(s) <= 63 and _DNS1035_LABEL.fullmatch(s) is not None


def _is_dns1123_subdomain(s: str) -> bool:
    return len(s) <= 253 and _DNS1123_SUBDOMAIN.fullmatch(s) is not None


def _name_rule(kind: str | None, api_version: str | None) -> tuple[str, Any]:
    """How the API server validates `metadata.name` of a kind (default: subdomain)."""
    if kind in {"Service", "JobSet"}:
        # A Service name becomes a DNS label; JobSet names its headless Service.
        return (
            "a DNS-1035 label (<=63 chars, lowercase alphanumerics and '-', starting with a letter)",
            _is_dns1035_label,
        )
    if kind == "Namespace" or (kind == "Job" and api_version == "batch.volcano.sh/v1alpha1"):
        return "a DNS-1123 label (<=63 chars, lowercase alphanumerics and '-')", _is_dns1123_label
    if kind == "Job":
        # A subdomain, but also the value of the job-name label on its pods.
        return (
            "a DNS-1123 subdomain of at most 63 chars",
            lambda s: len(s) <= 63 and _is_dns1123_subdomain(s),
        )
    return (
        "a DNS-1123 subdomain (<=253 chars, lowercase alphanumerics, '-' and '.')",
        _is_dns1123_subdomain,
    )


def parse_quantity(value: Any) -> Fraction:
    """Parse a Kubernetes resource quantity ("500m", "64Gi", 8, "1e3").

    Raises:
        ValueError: when `value` is not a quantity.
    """
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ValueError(f"not a quantity: {value!r}")
    m = _QUANTITY.fullmatch(str(value))
    if not m:
        raise ValueError(f"not a quantity: {value!r}")
    number = Fraction(m["num"])
    suffix = m["suffix"] or ""
    if suffix in _BINARY:
        return number * _BINARY[suffix]
    exponent = _DECIMAL[suffix] if suffix in _DECIMAL else int(suffix[1:] or 0)
    return number * Fraction(10) ** exponent


def _label_key_problem(key: str) -> str | None:
    prefix, _, name = key.rpartition("/")
    if "/" in key and not prefix:
        return "empty prefix"
    if prefix and not _is_dns1123_subdomain(prefix):
        return f"prefix {prefix!r} is not a DNS-1123 subdomain"
    if not name or len(name) > 63 or not _LABEL_NAME.fullmatch(name):
        return "name part must be <=63 chars, alphanumeric at both ends, '-', '_', '.' inside"
    return None


def _label_value_problem(value: Any) -> str | None:
    if not isinstance(value, str):
        return f"value {value!r} is not a string"
    if value and (len(value) > 63 or not _LABEL_NAME.fullmatch(value)):
        return (
            f"value {value!r} must be <=63 chars, alphanumeric at both ends, '-', '_', '.' inside"
        )
    return None


def _describe(doc: Mapping[str, Any]) -> str:
    meta = doc.get("metadata") or {}
    return f"{doc.get('kind', '?')}/{meta.get('name') or meta.get('generateName') or '?'}"


def _pod_templates(doc: Mapping[str, Any]) -> Iterator[tuple[str, dict[str, Any], bool]]:
    """Yield (path, pod template, runs under a batch Job) for each pod template in `doc`."""
    kind, api = doc.get("kind"), doc.get("apiVersion")
    spec = doc.get("spec") or {}
    if kind == "Job" and api == "batch/v1":
        yield "spec.template", spec.get("template") or {}, True
    elif kind == "JobSet":
        for i, rj in enumerate(spec.get("replicatedJobs") or []):
            tmpl = ((rj.get("template") or {}).get("spec") or {}).get("template") or {}
            yield f"spec.replicatedJobs[{i}].template.spec.template", tmpl, True
    elif kind == "Job" and api == "batch.volcano.sh/v1alpha1":
        for i, task in enumerate(spec.get("tasks") or []):
            yield f"spec.tasks[{i}].template", task.get("template") or {}, False
    elif kind == "Pod":
        yield "", {"metadata": doc.get("metadata") or {}, "spec": spec}, False
    elif isinstance(spec.get("template"), dict):  # Deployment, StatefulSet, ...
        yield "spec.template", spec["template"], False


def _containers(pod_spec: Mapping[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    for field in ("initContainers", "containers"):
        for i, c in enumerate(pod_spec.get(field) or []):
            yield f"{field}[{i}]", c


def _check_labels(where: str, labels: Any, out: list[str]) -> None:
    if not isinstance(labels, Mapping):
        return
    for key, value in labels.items():
        problem = _label_key_problem(str(key)) or _label_value_problem(value)
        if problem:
            out.append(f"{where}[{key!r}]: {problem}")


def _check_resources(where: str, resources: Mapping[str, Any], out: list[str]) -> None:
    parsed: dict[str, dict[str, Fraction]] = {}
    for field in ("requests", "limits"):
        for name, value in (resources.get(field) or {}).items():
            try:
                q = parse_quantity(value)
            except ValueError:
                out.append(f"{where}.{field}[{name!r}]: {value!r} is not a resource quantity")
                continue
            if q < 0:
                out.append(f"{where}.{field}[{name!r}]: must not be negative")
            parsed.setdefault(field, {})[name] = q
    requests, limits = parsed.get("requests", {}), parsed.get("limits", {})
    for name, request in requests.items():
        if name in limits and request > limits[name]:
            out.append(f"{where}: request {name} must be <= its limit")
        # Extended resources (vendor.com/x) and hugepages cannot be
        # overcommitted: the API server wants a limit equal to the request.
        if _not_overcommittable(name) and limits.get(name) != request:
            limit = resources.get("limits", {}).get(name, "<unset>")
            out.append(
                f"{where}: {name} request {resources['requests'][name]!r} must equal its limit {limit!r}"
            )


def _not_overcommittable(name: str) -> bool:
    if name.startswith("hugepages-"):
        return True
    return "/" in name and not name.split("/", 1)[0].endswith("kubernetes.io")


def check_semantics(docs: Iterable[Mapping[str, Any]]) -> list[str]:
    """Check what the API server enforces beyond the schemas.

    Per document: `metadata.name`/`namespace` syntax and length for the kind,
    label keys and values (object, pod templates, selectors), resource
    quantities, restartPolicy Never/OnFailure for pods run by a batch Job,
    extended resources with request == limit. Across documents: each Indexed
    Job whose documents include Services must set its pod `subdomain` to one
    of them, and that Service must be headless with a selector matching the
    pod labels.

    Returns:
        One string per problem, "<Kind>/<name>: <path>: <what>"; empty if fine.
    """
    docs = list(docs)
    problems: list[str] = []
    for doc in docs:
        out: list[str] = []
        _check_doc(doc, out)
        problems += [f"{_describe(doc)}: {p}" for p in out]
    problems += _check_indexed_job_services(docs)
    return problems


def _check_doc(doc: Mapping[str, Any], out: list[str]) -> None:
    kind, api = doc.get("kind"), doc.get("apiVersion")
    meta = doc.get("metadata") or {}
    name = meta.get("name")
    rule, ok = _name_rule(kind, api)
    if name is None:
        if not meta.get("generateName"):
            out.append("metadata.name: missing")
    elif not isinstance(name, str) or not ok(name):
        out.append(f"metadata.name: {name!r} must be {rule}")
    ns = meta.get("namespace")
    if ns is not None and not (isinstance(ns, str) and _is_dns1123_label(ns)):
        out.append(f"metadata.namespace: {ns!r} must be a DNS-1123 label")
    _check_labels("metadata.labels", meta.get("labels"), out)
    for key in meta.get("annotations") or {}:
        problem = _label_key_problem(str(key))
        if problem:
            out.append(f"metadata.annotations[{key!r}]: {problem}")

    spec = doc.get("spec") or {}
    if kind == "Service":
        _check_labels("spec.selector", spec.get("selector"), out)
    if kind == "Job" and api == "batch/v1":
        _check_labels(
            "spec.selector.matchLabels", (spec.get("selector") or {}).get("matchLabels"), out
        )
        if spec.get("completionMode") == "Indexed":
            completions = spec.get("completions")
            if not isinstance(completions, int) or completions < 1:
                out.append("spec.completions: required (>= 1) for an Indexed Job")
            elif isinstance(name, str) and len(f"{name}-{completions - 1}") > 63:
                # The job controller names pod hostnames <job>-<index>.
                out.append(
                    f"metadata.name: pod hostname {name}-{completions - 1} would exceed 63 chars"
                )
    if kind == "JobSet":
        for i, rj in enumerate(spec.get("replicatedJobs") or []):
            rj_name = rj.get("name")
            if not isinstance(rj_name, str) or not _is_dns1035_label(rj_name):
                out.append(f"spec.replicatedJobs[{i}].name: {rj_name!r} must be a DNS-1035 label")
    if kind == "Job" and api == "batch.volcano.sh/v1alpha1":
        for i, task in enumerate(spec.get("tasks") or []):
            t_name = task.get("name")
            if t_name is not None and not (isinstance(t_name, str) and _is_dns1123_label(t_name)):
                out.append(f"spec.tasks[{i}].name: {t_name!r} must be a DNS-1123 label")

    for path, tmpl, under_job in _pod_templates(doc):
        prefix = f"{path}." if path else ""
        _check_labels(f"{prefix}metadata.labels", (tmpl.get("metadata") or {}).get("labels"), out)
        pod = tmpl.get("spec") or {}
        if under_job and pod.get("restartPolicy") not in ("Never", "OnFailure"):
            out.append(
                f"{prefix}spec.restartPolicy: {pod.get('restartPolicy')!r} must be Never or OnFailure for a Job's pods"
            )
        for field in ("hostname", "subdomain"):
            value = pod.get(field)
            if value is not None and not (isinstance(value, str) and _is_dns1123_label(value)):
                out.append(f"{prefix}spec.{field}: {value!r} must be a DNS-1123 label")
        for cpath, container in _containers(pod):
            c_name = container.get("name")
            if not (isinstance(c_name, str) and _is_dns1123_label(c_name)):
                out.append(f"{prefix}spec.{cpath}.name: {c_name!r} must be a DNS-1123 label")
            resources = container.get("resources")
            if isinstance(resources, Mapping):
                _check_resources(f"{prefix}spec.{cpath}.resources", resources, out)
        for i, vol in enumerate(pod.get("volumes") or []):
            size = (vol.get("emptyDir") or {}).get("sizeLimit")
            if size is not None:
                try:
                    parse_quantity(size)
                except ValueError:
                    out.append(
                        f"{prefix}spec.volumes[{i}].emptyDir.sizeLimit: {size!r} is not a resource quantity"
                    )


def _check_indexed_job_services(docs: Sequence[Mapping[str, Any]]) -> list[str]:
    def ns(doc: Mapping[str, Any]) -> str | None:
        return (doc.get("metadata") or {}).get("namespace")

    services = {
        ((d.get("metadata") or {}).get("name"), ns(d)): d
        for d in docs
        if d.get("kind") == "Service"
    }
    problems: list[str] = []
    if not services:
        return problems
    for job in docs:
        spec = job.get("spec") or {}
        if not (
            job.get("kind") == "Job"
            and job.get("apiVersion") == "batch/v1"
            and spec.get("completionMode") == "Indexed"
        ):
            continue
        tmpl = spec.get("template") or {}
        pod = tmpl.get("spec") or {}
        subdomain = pod.get("subdomain")
        names = sorted(str(n) for n, n_ns in services if n_ns == ns(job))
        if subdomain is None:
            problems.append(
                f"{_describe(job)}: spec.template.spec.subdomain: unset, so pods get no DNS "
                f"name under the Service ({', '.join(names)}); set it to the Service's name"
            )
            continue
        service = services.get((subdomain, ns(job)))
        if service is None:
            problems.append(
                f"{_describe(job)}: spec.template.spec.subdomain: {subdomain!r} names no Service "
                f"in the same namespace (have: {', '.join(names) or 'none'})"
            )
            continue
        svc_spec = service.get("spec") or {}
        if svc_spec.get("clusterIP") != "None":
            problems.append(
                f"{_describe(service)}: spec.clusterIP: must be 'None' (headless) so that "
                f"<pod hostname>.{subdomain} resolves to each pod"
            )
        selector = svc_spec.get("selector") or {}
        pod_labels = (tmpl.get("metadata") or {}).get("labels") or {}
        if not selector:
            problems.append(
                f"{_describe(service)}: spec.selector: empty, selects no pods of {_describe(job)}"
            )
        else:
            missing = {k: v for k, v in selector.items() if pod_labels.get(k) != v}
            if missing:
                problems.append(
                    f"{_describe(service)}: spec.selector: {missing} not among the pod labels "
                    f"of {_describe(job)} ({pod_labels})"
                )
    return problems
