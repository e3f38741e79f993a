"""plan_rotation: hand-worked cases, then its invariants under random save / upload / failure / crash sequences."""

from hypothesis import given, settings
from hypothesis import strategies as st

from skyrl_train.storage.checkpoint_rotation import CheckpointState, RotationPlan, plan_rotation


def state(local=(), remote=(), partial=(), uploading=(), latest=None):
    return CheckpointState(frozenset(local), frozenset(remote), frozenset(partial), frozenset(uploading), latest)


def test_uploaded_local_copies_beyond_keep_local_are_deleted():
    plan = plan_rotation(state(local={1, 2, 3}, remote={1, 2, 3}, latest=3), keep_local=1, keep_remote=3)
    assert plan == RotationPlan(delete_local=(1, 2))


def test_a_local_copy_not_yet_in_s3_is_kept():
    plan = plan_rotation(state(local={1, 2, 3}, remote={1}, latest=3), keep_local=1, keep_remote=3)
    assert plan == RotationPlan(delete_local=(1,))


def test_a_step_still_uploading_is_kept_locally_even_if_an_older_copy_is_in_s3():
    plan = plan_rotation(state(local={2, 3}, remote={2, 3}, uploading={2}, latest=3), keep_local=1, keep_remote=3)
    assert plan == RotationPlan()


def test_remote_copies_beyond_keep_remote_are_deleted_oldest_first():
    plan = plan_rotation(state(local={5}, remote={1, 2, 3, 4, 5}, latest=5), keep_local=1, keep_remote=2)
    assert plan == RotationPlan(delete_remote=(1, 2, 3))


def test_keep_local_zero_deletes_even_the_newest_local_copy_once_verified():
    plan = plan_rotation(state(local={4}, remote={4}, latest=4), keep_local=0, keep_remote=1)
    assert plan == RotationPlan(delete_local=(4,))


def test_the_step_latest_names_keeps_its_remote_copy_beyond_keep_remote():
    # resumed from step 2 (pointer) while S3 still has 3 from before: 2 stays although keep_remote=1 keeps only 3
    plan = plan_rotation(state(local=(), remote={1, 2, 3}, latest=2), keep_local=1, keep_remote=1)
    assert plan == RotationPlan(delete_remote=(1,))


def test_incomplete_remote_folders_are_deleted_unless_uploading():
    plan = plan_rotation(state(local={3, 4}, remote={3}, partial={2, 4}, uploading={4}, latest=4), 2, 3)
    assert plan == RotationPlan(delete_remote_partial=(2,))


def test_keep_all_deletes_nothing():
    plan = plan_rotation(state(local={1, 2, 3}, remote={1, 2, 3}, latest=3), keep_local=-1, keep_remote=-1)
    assert plan == RotationPlan()


# ------------------------------------------------------------------------------------ property-based model


class World:
    """What exists locally and in S3, driven the way `S3CheckpointSink` and `CheckpointManager` drive it."""

    def __init__(self, keep_local, keep_remote):
        self.keep_local, self.keep_remote = keep_local, keep_remote
        self.local, self.remote, self.partial, self.uploading = set(), set(), set(), set()
        self.latest = None

    def snapshot(self):
        return state(self.local, self.remote, self.partial, self.uploading, self.latest)

    def rotate(self):
        before = self.snapshot()
        plan = plan_rotation(before, self.keep_local, self.keep_remote)
        self.local -= set(plan.delete_local)
        self.remote -= set(plan.delete_remote)
        self.partial -= set(plan.delete_remote_partial)
        check_plan(before, plan, self)

    def save(self, disk_full=False):
        self.rotate()  # before_save
        if disk_full:
            return  # the write failed: nothing committed
        step = (self.latest or 0) + 1
        self.local.add(step)
        self.latest = step
        self.uploading.add(step)  # after_save

    def finish_upload(self, index, ok):
        if not self.uploading:
            return
        step = sorted(self.uploading)[index % len(self.uploading)]
        if ok:
            self.remote.add(step)  # manifest written; the uploader has not yet marked the step done ...
            self.partial.discard(step)
            self.rotate()  # ... when the training thread rotates before its next save
            self.uploading.discard(step)
        else:
            self.uploading.discard(step)
            self.remote.discard(step)  # a re-upload deletes the old manifest first
            self.partial.add(step)
        self.rotate()

    def crash_and_resume(self, wipe_local):
        self.partial |= self.uploading - self.remote
        self.uploading = set()
        if wipe_local:
            self.local = set()
        pointer = self.latest
        local = pointer if pointer in self.local else max((s for s in self.local if s < (pointer or 0)), default=None)
        newest_remote = max(self.remote, default=None)
        if newest_remote is not None and (local is None or newest_remote > local):
            self.local.add(newest_remote)  # downloaded and installed; the pointer names it
            self.latest = newest_remote
        else:
            self.latest = local
        self.uploading |= {s for s in self.local if s <= (self.latest or 0)} - self.remote  # begin(): re-upload


def check_plan(before, plan, after):
    deleted_anywhere = set(plan.delete_local) | set(plan.delete_remote) | set(plan.delete_remote_partial)
    assert not deleted_anywhere & before.uploading, "a step in flight was deleted"
    assert set(plan.delete_local) <= before.remote, "a local copy was deleted before its S3 copy was verified"
    newest = before.newest_complete
    if newest is not None:
        assert newest in after.local | after.remote, "the newest complete checkpoint lost every copy"
        assert newest not in plan.delete_remote
    if before.latest is not None and before.latest in before.local | before.remote:
        assert before.latest in after.local | after.remote, "latest names a step with no copy"
    protected_local = before.uploading | (before.local - before.remote)
    if after.keep_local >= 0:
        assert len(after.local - protected_local) <= after.keep_local
    if after.keep_remote >= 0:
        assert len(after.remote - {before.latest, newest} - before.uploading) <= after.keep_remote
    assert after.partial <= before.uploading | before.remote, "an abandoned partial upload was left in S3"


operations = st.lists(
    st.one_of(
        st.just(("save",)),
        st.just(("disk_full",)),
        st.tuples(st.just("upload_ok"), st.integers(0, 3)),
        st.tuples(st.just("upload_fail"), st.integers(0, 3)),
        st.just(("crash",)),
        st.just(("crash_wipe_local",)),
    ),
    max_size=40,
)


@settings(max_examples=300, deadline=None)
@given(keep_local=st.sampled_from([-1, 0, 1, 2]), keep_remote=st.sampled_from([-1, 0, 1, 2, 3]), ops=operations)
def test_rotation_invariants_hold_under_any_sequence(keep_local, keep_remote, ops):
    world = World(keep_local, keep_remote)
    for op in ops:
        match op:
            case ("save",):
                world.save()
            case ("disk_full",):
                world.save(disk_full=True)
            case ("upload_ok", index):
                world.finish_upload(index, ok=True)
            case ("upload_fail", index):
                world.finish_upload(index, ok=False)
            case ("crash",):
                world.crash_and_resume(wipe_local=False)
            case ("crash_wipe_local",):
                world.crash_and_resume(wipe_local=True)
        if world.latest is not None:
            assert world.latest in world.local | world.remote, f"latest={world.latest} has no copy after {op}"
        assert world.uploading <= world.local, "an upload in flight lost its local folder"
