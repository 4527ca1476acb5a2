"""Finalisation: the archs a run hands over, trained past their inherited weights.

Modules: `settings.py` (`FinalizeConfig`), `selection.py` (which archs: `select_spread`), `plan.py` (the archs and
their epochs, kept in the run directory), `budget.py` (the plan under a run budget), `replan.py` (that plan held
to the budget as it trains: `Replanner`), `lockstep.py`
(`LockstepTrainer`) and its collaborators (`schedules.py` optimizers and learning rates, `lockstep_state.py` its
checkpoint, `net_threads.py` the nets side by side and their dropout seeds, `graph_steps.py` CUDA graphs,
`net_timing.py` each net's time), `final_scores.py` (trained or inherited weights, test and INT8 scores), `stage.py`
(`finalize`: plan, train, score).

Inherited weights rank archs; they are not what a user deploys. After the search, `archs` archs spread over
the cost range of the front (`select_spread`) are trained further as standalone networks, from their
inherited weights (`init: inherited`, fine-tuning as in Once-for-All) or from fresh weights (`init: scratch`:
`SearchSpace.fresh_network`'s, as a from-scratch baseline starts, so that both train by one recipe), optionally
with knowledge distillation from the supernet's largest arch (`kd_ratio`; Hinton et al. 2015; OFA, BigNAS).
The default configs distil nothing: trained students overtake the inherited teacher, which then holds them back.
All of them train in lockstep on the same batches, so each batch and the teacher's output on it are computed
once for all students; on the CPU the students train side by side, one per thread, the teacher's forward beside
theirs (`NetThreads.side_by_side`).

Each finalised arch gets `final_<metric>` (the whole val split) and `final_test_<metric>` (and, for tasks that
report more, e.g. `final_test_ssim`); its weights are kept under `checkpoint/final/` for `vpunas export`. Where its
inherited subnet scores better on the whole val split than the trained net, the arch keeps its inherited weights
(`final_epochs` 0, logged): finalisation never makes an arch worse. With
`int8`, it also gets `final_int8_test_<metric>`: the test metric of its INT8 model, as the NPU runs it.
The Kendall tau between inherited-weight and finalised val metric over the finalised archs is the supernet's
ranking fidelity.

Screening (`screen_archs` > `archs`): inherited weights rank archs poorly (that Kendall tau), so more archs than
will be finalised are chosen the same way and all trained for the first `screen_epochs` of the schedule; their
val metric then chooses the `archs` that continue (`select_spread` again, on it), as successive halving does
(Jamieson & Talwalkar 2016; Hyperband). The chosen archs continue where they stopped, so each gets the same
schedule as without screening.

Machines differ by several times in speed: under a run budget (`run_budget_minutes`), the schedule is fitted
before its first step to what the run has left (`fit_to_budget`), so a run keeps its length rather than its
epochs. Where the budget leaves time to spare at the full epochs, up to `max_archs` archs are finalised instead of
`archs`. The time is then split among the archs by their step times
(`budgeted_epochs`): a cheap arch trains longer (up to `max_epochs`) than a costly one (down to half of
`epochs`), since the same seconds buy it more epochs. Each net leaves the lockstep when its own schedule ends.
The budget is the whole run's: the archs' scoring and the stages after finalisation are set aside. As the
training goes, the pace of its steps against the plan's timing re-plans it (`Replanner`): when the run would end
past its budget (a machine loaded after the timing), the archs still training get fewer epochs, never fewer than
they have trained.

Resuming: the plan (which archs, how many epochs each, whether they continue the screening, the timing it was
fitted to) is kept in the run directory (`FinalizationPlan`), each re-plan recorded there after the training's
checkpoint holds it, so a resumed run trains the same archs for the same epochs. The
lockstep training state (weights, optimizers, step) is checkpointed like the supernet's (the screening's in a
file of its own), screening scores and each scored arch are journaled (a finalised arch after its weights are
saved, its INT8 score in a journal of its own), so a restart repeats neither finished steps nor scores.
"""
from .budget import budgeted_archs, budgeted_epochs, fit_to_budget
from .final_scores import better_of, final_weights_path, load_final_weights
from .lockstep import LockstepTrainer, lockstep_trainer
from .plan import FinalizationPlan
from .replan import PlanTiming, Replanner, planned_seconds
from .selection import feasible_records, ranking_fidelity, select_spread
from .settings import FinalizeConfig
from .stage import finalize

__all__ = ["FinalizeConfig", "FinalizationPlan", "LockstepTrainer", "PlanTiming", "Replanner", "better_of",
           "budgeted_archs", "budgeted_epochs", "feasible_records", "final_weights_path", "finalize", "fit_to_budget",
           "load_final_weights", "lockstep_trainer", "planned_seconds", "ranking_fidelity", "select_spread"]
