"""benchmarks/collectives.py reads the collectives of compiled HLO text."""

from benchmarks import collectives

HLO = """
ENTRY %main {
  %p0 = f32[256]{0} parameter(0)
  %all-reduce-start = (f32[256]{0}, bf16[3,3,64,64]{3,2,1,0:T(8,128)(2,1)}) all-reduce-start(f32[256]{0} %p0, bf16[3,3,64,64]{3,2,1,0} %p1), channel_id=1, replica_groups={{0,1,2,3}}, use_global_device_ids=true, to_apply=%add, metadata={op_name="jit(local_step)/shard_map/pmean"}
  %all-reduce-done = (f32[256]{0}, bf16[3,3,64,64]{3,2,1,0}) all-reduce-done((f32[256]{0}, bf16[3,3,64,64]{3,2,1,0}) %all-reduce-start)
  %all-reduce.7 = f32[2,64]{1,0} all-reduce(f32[2,64]{1,0} %x), channel_id=2, replica_groups=[1,4]<=[4], to_apply=%add, metadata={op_name="jit(local_step)/BatchNorm/psum"}
  %all-gather-start = (s32[4]{0}, s32[16]{0}) all-gather-start(s32[4]{0} %y), channel_id=3, replica_groups={{0,1,2,3}}, dimensions={0}
  ROOT %t = (f32[256]{0}) tuple(%p0)
}
"""  # noqa: E501  (HLO's lines as XLA prints them)


def test_each_collective_once_with_its_bytes_sources_and_groups():
    found = collectives.collectives(HLO)
    assert [c.op for c in found] == ["all-reduce", "all-reduce", "all-gather"]
    combined, stats, gather = found
    assert combined.bytes == 256 * 4 + 3 * 3 * 64 * 64 * 2
    assert combined.arrays == 2
    assert combined.source.endswith("/pmean")
    assert combined.groups == "{{0,1,2,3}}"
    assert (stats.bytes, stats.groups) == (2 * 64 * 4, "[1,4]<=[4]")
    assert (gather.bytes, gather.arrays) == (16 * 4, 1)  # its result only


def test_the_table_totals_the_bytes():
    text = collectives.table(collectives.collectives(HLO))
    assert text.splitlines()[-1].startswith("| total (3) | 0.07 |")
