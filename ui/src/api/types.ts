// The answers of the plugin API, named: every type here comes from the generated schema (src/api/schema.ts, from
// the Python app's OpenAPI schema by `npm run gen:api`), none is written by hand.
import type { components } from "./schema";

type S = components["schemas"];
export type Board = S["BoardView"];
export type BoardHost = S["BoardHostView"];
export type BoardGpu = S["BoardGPUView"];
export type BoardLease = S["BoardLeaseView"];
export type Measured = S["MeasuredView"];
export type Wait = S["WaitView"];
export type Quotas = S["QuotaView"];
export type QuotaGroup = S["QuotaGroupView"];
export type TaskLease = S["TaskLeaseView"];
export type Timeline = S["TimelineView"];
export type TimelineRow = S["TimelineRow"];
export type TimelineBar = S["TimelineBar"];
export type Sweeps = S["SweepsView"];
export type Sweep = S["SweepView"];
export type SweepPoint = S["SweepPoint"];
export type LeaderRow = S["LeaderRow"];
export type TrialRef = S["TrialRef"];
export type Curve = S["CurveView"];
export type Objective = S["ObjectiveView"];
export type Population = S["PopulationView"];
export type Importance = S["ImportanceView"];
export type Comparison = S["ComparisonView"];
export type Trial = S["TrialView"];
export type SlurmJob = S["JobView"];
export type NoSlurmJob = S["NoSlurmJob"];
