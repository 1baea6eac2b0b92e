"""Every old module of core/sweep (issue 78 split it into subpackages) is a deprecation alias: importing it warns
naming its new home, and every public name it had before the split (dd2d6f6, listed here as data) still imports
from it; a pickle of a spec made under the old module path still loads."""

from __future__ import annotations

import importlib
import pickle
import sys
import warnings

import pytest

from airflow_provider_gpusched.core.deprecation import GpuschedDeprecationWarning
from airflow_provider_gpusched.core.sweep.definition.sweep_spec import SweepSpec

PACKAGE = "airflow_provider_gpusched.core.sweep"
#: each old module's top-level public names at dd2d6f6 (its functions, classes and constants; spec and spec_schema
#: also the settings records they imported)
OLD_NAMES = {
    "analysis": "BINS MAX_PAIRS MIN_TRIALS compare_runs param_importance",
    "asynchronous": "ASKS_PER_TRIAL AsyncOptunaSearch AsyncRun HANDED_FILE SPEC_FILE StageSession",
    "batch": (
        "GROW_TO LocalBatch SHRINK_TAIL_ABOVE SlotSearch TAKEN_POLL_SECONDS WORKER_RESTARTS default_parallel "
        "group_label run_local_batch"
    ),
    "command": (
        "PLACEHOLDER TRIAL_FIELDS check_command_placeholders command_placeholders format_command "
        "placeholder_values resolve_command_paths value_text"
    ),
    "config_template": "ConfigTemplate MAX_CONFIG_TEMPLATE NotRegular TEMPLATE_KINDS check_regular",
    "end_report": "MAX_FAILURES SweepEndReport TAIL_LINES build_end_report format_for",
    "expand": (
        "DEFAULT_LABELS FolderText GridSweep LabelFormat MAX_PARAMS_BYTES SPACES Trial check_space "
        "finite_space_size flatten make_trial nested random_trials safe_name safe_text sample_params "
        "trial_id trial_label"
    ),
    "hyperband": "BRACKETS_FILE HyperbandKind HyperbandSearch",
    "kind_settings": "AtLeastOne AtLeastZero EvolutionSettings Fraction HyperbandSettings PBTSettings",
    "model_cost": "ModelCost UNITS model_cost",
    "objective": (
        "MODES NUMPY_FRONT Objective crowding_distances format_leaderboard leaderboard "
        "objective_from_mapping pareto_front pareto_fronts"
    ),
    "pbt": (
        "CHECKPOINT_FOLDER HANDED_OVER_FILE LINEAGE_FILE LineageEntry LineageExploit LineageFrom "
        "LineageRecord MAX_VIEW_EXPLOITS MAX_VIEW_MEMBERS PBTKind PBTSearch PopulationGeneration "
        "PopulationMember PopulationView check_lineage hand_over log population_view read_handed_over "
        "read_lineage"
    ),
    "pruner": (
        "ENTRY_POINT_GROUP OPTIONAL_SETTINGS Peer Pruner PruningRule REGISTRY Reports pruner_class "
        "pruner_names register_pruner unregister_pruner"
    ),
    "pruners": (
        "ASHARule IN_STUDY_ONLY MedianRule OPTUNA_PRUNERS OptunaJudge OptunaRule StudyJudge "
        "judge_with_optuna make_optuna_pruner"
    ),
    "pruning": "PRUNING_ENV SHARED_STUDY_ENV SweepReports TrialPruned judge rule_from_env",
    "reports": (
        "MAX_REPORTS_BYTES MAX_REPORT_DEPTH MAX_REPORT_LINE_BYTES MAX_STEP PREVIOUS_REPORTS_FILE RAN_AGAIN "
        "REPORTS_FILE REPORT_ENV UI_REPORTS_BYTES parse_report_line read_reports reports_of_run summarise"
    ),
    "resources": "EnvName EnvValue SlurmName TrialResources",
    "search": (
        "ENUMERATE_UP_TO EvolutionSearch JOURNAL_FILE OptunaSearch REBUILT_ATTR RoundSearch TRIAL_ATTRS "
        "bad_journal make_search open_journal report_curve"
    ),
    "search_kind": "ENTRY_POINT_GROUP KindSpec REGISTRY SEARCH_KINDS SearchInRounds SearchKind SpecT",
    "search_kinds": (
        "EvolutionKind GridKind OptunaKind RandomKind register_search_kind search_kind unregister_search_kind"
    ),
    "seed_formats": "PAVI_LAUNCHERS SCHEDULER_CONFIG scheduler_config seed_resources",
    "session": "ONE_SHOT_MANIFEST SweepSession default_results_root manifest_name",
    "space_yaml": "SPACE_MAKERS parse_dim",
    "spaces": (
        "Choice Conditional LogUniform MAX_POINTS QUniform RandInt Space Uniform choice loguniform quniform "
        "randint uniform when"
    ),
    "spec": "AtLeastOne DEFAULT_MAX_TRIALS EvolutionSettings HyperbandSettings PBTSettings SweepSpec TrueOrFalse",
    "spec_files": "FILE_ONLY_KEYS read_spec_file spec_arguments",
    "spec_schema": "EvolutionSettings SCHEMA_ID TARGET sweep_schema",
    "store": (
        "CLAIM_FILE DAGS_FILE DONE_STATES FAILED_STATES FINAL_STATES MAX_RESULT_BYTES MAX_RESULT_DEPTH "
        "MAX_RESULT_VALUES MAX_SWEEP_NAME OUTPUT_LOG_FILE PREVIOUS_RESULT_FILE RUN_STATES STATES TrialClaim "
        "TrialStore check_results_folders check_sweep_name describe_holder folder_dags folder_refusal "
        "format_counts gpu_share_from_env read_json read_pickled_result read_result_json state_counts "
        "state_in_run where_running write_json"
    ),
    "terminal": (
        "Progress RUN_END RunEndHook StageHook StageStopped SweepInterrupted SweepRunner ctrl_c_stops "
        "default_manager import_callable_or_value load_spec run_stages run_sweep script_directory "
        "stopped_run"
    ),
    "tracking_callback": "SweepRun TrackingCallback TrialEnd TrialReport TrialRun",
    "tracking_settings": (
        "ENTRY_POINT_GROUP SERVER_URL SETTINGS TRACKERS TrackerConfig parse_tracking register_tracker "
        "tracking_uri_problem unregister_tracker"
    ),
    "trial_report": "report",
    "trial_run": (
        "CALLABLE_FILE EXIT_INVALID_RESULT EXIT_USAGE EXIT_WRITE_FAILED INVALID_RESULT_POLICIES MANIFEST "
        "Manifest ManifestRecord ManifestTrial PRUNE_CHECK_SECONDS PRUNE_GRACE_SECONDS REQUIRED_ENV_FILE "
        "RUNNER_MODULE RunnerCommand TRIAL_SET Text TrialSet WORKER_MODULE call_trial chunk_argv "
        "distributed_argv error_line group_argv main mark_unfinished parse_runner_args relative_path_hint "
        "render_config required_env result_document result_problem run_group run_trial runner_argv "
        "save_callable trial_argv trial_environment trial_set worker_argv write_group_manifest "
        "write_manifest"
    ),
    "view": (
        "CurveView Id LOG_AXIS_RATIO LatestReport LeaderRow MAX_CATEGORIES MAX_CURVES MAX_CURVE_POINTS "
        "MAX_POINTS MAX_PUBLISHED_TRIALS MAX_REPORT_READS Note OUTCOME OUTCOMES_XCOM ObjectiveView PLAN "
        "PLAN_XCOM PlanRecord PlanTrial SkippedTrial SweepPoint SweepView TrialOutcome TrialRef add_outcomes "
        "best_so_far build_sweep_view outcome_records param_axes plan_record read_outcome_records "
        "read_plan_record report_paths report_runs sample_points scored_points sweep_objective trial_counts "
        "trial_rows"
    ),
    "worker": "main run_worker",
}


def test_the_list_is_every_old_module():
    from pathlib import Path

    here = Path(importlib.util.find_spec(PACKAGE).origin).parent
    assert sorted(OLD_NAMES) == sorted(p.stem for p in here.glob("*.py") if p.name != "__init__.py")


@pytest.mark.parametrize("old", sorted(OLD_NAMES))
def test_an_old_module_warns_naming_its_new_home_and_keeps_its_names(old, monkeypatch):
    name = f"{PACKAGE}.{old}"
    monkeypatch.delitem(sys.modules, name, raising=False)
    with pytest.warns(GpuschedDeprecationWarning) as caught:
        module = importlib.import_module(name)
    said = [str(w.message) for w in caught if f"{name} is now " in str(w.message)]
    assert said, [str(w.message) for w in caught]
    homes = said[0].split(" is now ", 1)[1].split(";")[0].split(", ")
    for home in homes:
        assert home.startswith("airflow_provider_gpusched.") and home != name
        importlib.import_module(home)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", GpuschedDeprecationWarning)
        missing = [n for n in OLD_NAMES[old].split() if not hasattr(module, n)]
    assert missing == []


def test_a_pickle_of_a_spec_under_its_old_module_path_loads():
    spec = SweepSpec(
        name="s",
        command=["python", "train.py"],
        space={"lr": [0.1, 0.2]},
        objective="minimize loss",
        pruning={"rule": "median"},
    )
    data = pickle.dumps(spec, protocol=2)  # no frames, a class named as "module\nname\n" (GLOBAL)
    new, old = f"{PACKAGE}.definition.sweep_spec".encode(), f"{PACKAGE}.spec".encode()
    data = data.replace(new + b"\n", old + b"\n")
    assert old in data and new not in data
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", GpuschedDeprecationWarning)
        loaded = pickle.loads(data)
    assert type(loaded) is SweepSpec and loaded == spec
