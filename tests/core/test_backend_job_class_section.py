"""A backend owns its section of a job class (issue 78, item 1): core/job_classes.py parses any registered backend's
section through the backend's ``job_class_settings``, and names none of them. A third backend declares one without
touching core/job_classes.py."""

from dataclasses import dataclass

import pytest

from airflow_provider_gpusched.core.backends import Backend, register_backend, unregister_backend
from airflow_provider_gpusched.core.errors import InvalidArgumentError
from airflow_provider_gpusched.core.job_classes import JobClassConfigError, JobClassMapping


@dataclass(frozen=True)
class ToyClassSettings:
    queue: str | None = None
    share: int = 1
    wait: float = 5.0
    lenient: bool = False

    checks = {"share": lambda value: _share(value)}  # a key its type does not say enough about

    @classmethod
    def for_class(cls, job_class):
        return cls(share=0 if job_class == "idle" else 1)


def _share(value):
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= 4:
        raise ValueError("a share from 0 to 4")
    return value


class ToyBackend(Backend):
    name = "toy"
    summary = "toy"
    job_class_settings = ToyClassSettings


@pytest.fixture
def toy():
    register_backend(ToyBackend)
    try:
        yield
    finally:
        unregister_backend("toy")


def test_a_registered_backend_has_its_section_with_its_defaults_per_class(toy):
    m = JobClassMapping()
    assert m["idle"].toy == ToyClassSettings(share=0) and m["normal"].section("toy") == ToyClassSettings()
    assert m["idle"].local.fill_in and m["idle"].section("slurm").partition == "idle"  # the built-in ones as before
    assert list(m.to_dict()["idle"]) == ["airflow", "slurm", "local", "toy"]


def test_its_section_is_read_from_the_file_and_checked_by_its_types_and_checks(toy, tmp_path):
    f = tmp_path / "classes.yaml"
    f.write_text("idle:\n  toy: {queue: spare, share: 3, wait: 2}\n  slurm: {partition: scavenger}\n")
    m = JobClassMapping.load(str(f))
    assert m["idle"].toy == ToyClassSettings(queue="spare", share=3, wait=2.0)
    assert m["idle"].slurm.partition == "scavenger" and m["normal"].toy == ToyClassSettings()
    for body, problem in [
        ({"share": 9}, "idle.toy.share: expected a share from 0 to 4, got 9"),
        ({"wait": "soon"}, "idle.toy.wait: expected a number of seconds >= 0"),
        ({"lenient": "yes"}, "idle.toy.lenient: expected true or false"),
        ({"queue": 3}, "idle.toy.queue: expected a string or null"),
        ({"speed": 1}, "idle.toy.speed: unknown setting; expected one of queue, share, wait, lenient"),
    ]:
        with pytest.raises(JobClassConfigError, match="^" + f"{f}: {problem}".replace(".", r"\.")):
            JobClassMapping.from_dict({"idle": {"toy": body}}, str(f))


def test_a_section_of_no_registered_backend_is_refused_naming_the_known_ones(toy):
    with pytest.raises(
        JobClassConfigError, match=r"idle\.k8s: unknown section; expected one of airflow, slurm, local, toy"
    ):
        JobClassMapping.from_dict({"idle": {"k8s": {}}}, "f.yaml")
    unregister_backend("toy")
    with pytest.raises(
        JobClassConfigError, match=r"idle\.toy: unknown section; expected one of airflow, slurm, local$"
    ):
        JobClassMapping.from_dict({"idle": {"toy": {}}}, "f.yaml")
    with pytest.raises(InvalidArgumentError, match="job class section"):
        JobClassMapping()["idle"].section("toy")
    assert not hasattr(JobClassMapping()["idle"], "toy")


def test_reading_this_hosts_classes_does_not_load_the_slurm_backend():
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from airflow_provider_gpusched.core.job_classes import JobClassMapping\n"
        "m = JobClassMapping.from_dict({'idle': {'local': {'grace_period': 1}}})\n"
        "assert m['idle'].local.grace_period == 1.0 and m['normal'].local.max_preemptions == 5\n"
        "print('airflow_provider_gpusched.core.slurm' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert out.stdout.strip() == "False"


def test_the_old_names_still_import_with_a_warning():
    from airflow_provider_gpusched.core import job_classes
    from airflow_provider_gpusched.core.deprecation import GpuschedDeprecationWarning
    from airflow_provider_gpusched.core.gpu.class_policy import LocalClassPolicy
    from airflow_provider_gpusched.core.slurm.options import SlurmClassSettings, slurm_class_settings

    for name, moved in [
        ("LocalClassPolicy", LocalClassPolicy),
        ("SlurmClassSettings", SlurmClassSettings),
        ("slurm_class_settings", slurm_class_settings),
    ]:
        with pytest.warns(GpuschedDeprecationWarning, match=f"core.job_classes.{name} is now"):
            assert getattr(job_classes, name) is moved
    with pytest.warns(GpuschedDeprecationWarning, match="sbatch_settings"):
        assert JobClassMapping()["idle"].slurm_settings(30) == {"partition": "idle", "requeue": True, "nice": 70}


def test_the_older_constructor_and_replace_still_set_the_backends_sections():
    import dataclasses

    from airflow_provider_gpusched.core.gpu.class_policy import LocalClassPolicy
    from airflow_provider_gpusched.core.job_classes import AirflowClassSettings, JobClass
    from airflow_provider_gpusched.core.slurm.options import SlurmClassSettings

    airflow, slurm, local = AirflowClassSettings(pool="p"), SlurmClassSettings(partition="big"), LocalClassPolicy()
    positional = JobClass("normal", airflow, slurm, local)
    assert positional.slurm is slurm and positional.local is local and positional.airflow is airflow
    assert JobClass("normal", airflow, slurm=slurm, local=local) == positional
    assert JobClass("normal", airflow, slurm).local == LocalClassPolicy()  # one left out: the backend's default
    replaced = dataclasses.replace(JobClassMapping()["normal"], slurm=slurm)
    assert replaced.slurm is slurm and replaced.airflow.priority_weight == 100
    with pytest.raises(TypeError, match="unexpected keyword argument 'k8s'"):
        JobClass("normal", airflow, k8s={})
    with pytest.raises(TypeError, match="at most 4 positional"):
        JobClass("normal", airflow, slurm, local, local)


def test_a_class_equals_and_hashes_by_what_each_section_reads(tmp_path):
    from airflow_provider_gpusched.core.job_classes import DEFAULT_CLASSES
    from airflow_provider_gpusched.core.slurm.options import SlurmClassSettings

    restated = JobClassMapping.from_dict({"idle": {"slurm": {}, "local": {"fill_in": True}}}, "f.yaml")
    assert restated["idle"] == DEFAULT_CLASSES["idle"] and hash(restated["idle"]) == hash(DEFAULT_CLASSES["idle"])
    assert restated == JobClassMapping(source="f.yaml")
    assert {restated["idle"], DEFAULT_CLASSES["idle"], DEFAULT_CLASSES["normal"]} == set(DEFAULT_CLASSES.values())
    changed = JobClassMapping.from_dict({"idle": {"slurm": {"partition": "other"}}})["idle"]
    assert changed != DEFAULT_CLASSES["idle"] and changed.slurm == SlurmClassSettings("other", None, 100, True)
    assert DEFAULT_CLASSES["idle"] != DEFAULT_CLASSES["normal"]


def test_comparing_this_hosts_classes_does_not_load_the_slurm_backend():
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from airflow_provider_gpusched.core.job_classes import JobClassMapping\n"
        "m = JobClassMapping.from_dict({'idle': {'local': {'fill_in': True}}})\n"
        "assert m.classes == JobClassMapping().classes and hash(m['idle']) == hash(JobClassMapping()['idle'])\n"
        "print('airflow_provider_gpusched.core.slurm' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert out.stdout.strip() == "False"
