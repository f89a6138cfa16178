"""The host round-trip audit and the transfer guard."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental import io_callback

from ops import host_audit


def _with_callback(x):
    with jax.named_scope("rpn"), jax.named_scope("nms"):
        y = jax.pure_callback(
            lambda a: np.asarray(a) * 2,
            jax.ShapeDtypeStruct(x.shape, x.dtype),
            x,
        )
    return y + 1


def test_finds_planted_pure_callback_by_name():
    findings = host_audit.audit(jax.jit(_with_callback), jnp.ones(3))
    assert len(findings) == 1
    assert findings[0].kind == "host callback"
    assert findings[0].op_name == "rpn/nms/pure_callback"
    assert findings[0].op_type == "pure_callback"
    assert "rpn/nms" in str(findings[0])


def test_finds_debug_print_and_io_callback():
    def noisy(x):
        jax.debug.print("x = {}", x.sum())
        io_callback(lambda a: None, None, x)
        return x * 2

    findings = host_audit.audit(jax.jit(noisy), jnp.ones(3))
    assert sorted(f.op_type for f in findings) == ["debug_print", "io_callback"]


def test_clean_function_reports_nothing():
    def clean(x):
        return jnp.sort(jnp.sin(x)) @ x

    assert host_audit.audit(jax.jit(clean), jnp.ones(8)) == []
    report = host_audit.describe([], "train_step")
    assert report == "train_step: no host round-trips (fully on device)"


def test_host_send_recv_and_infeed_lines_are_findings():
    hlo = "\n".join(
        [
            "  %send.1 = (f32[3]{0}, u32[], token[]) send(%x, %t),"
            " channel_id=1,"
            ' is_host_transfer=true, metadata={op_name="jit(f)/roi/cb"}',
            "  %recv.2 = (f32[3]{0}, u32[], token[]) recv(%t), channel_id=2,"
            " is_host_transfer=false",
            "  %infeed.3 = ((f32[2]{0}), token[]) infeed(%t)",
            "  %send-done.4 = token[] send-done(%send.1), channel_id=1",
            "  %cb.5 = s32[2]{0} custom-call(%p), custom_call_target="
            '"xla_ffi_python_cpu_callback", metadata={op_name="jit(step)/'
            'shard_map(local)/jvp(rpn)/nms/pure_callback"}',
        ]
    )
    findings = host_audit.audit_hlo_text(hlo)
    assert [(f.kind, f.op_name) for f in findings] == [
        ("host send", "roi/cb"),
        ("infeed", "<no metadata>"),
        ("host callback", "rpn/nms/pure_callback"),
    ]
    assert findings[2].op_type == "pure_callback"


def test_op_name_drops_the_shard_map_scope_of_a_multi_device_mesh():
    # What a shard_map over 2 devices compiles to (1 device: no scope).
    hlo = (
        "  %cb.1 = f32[2]{0} custom-call(%p), custom_call_target="
        '"xla_ffi_python_cpu_callback", metadata={op_name="jit(f)/'
        'shard_map/rpn/nms/pure_callback"}'
    )
    [finding] = host_audit.audit_hlo_text(hlo)
    assert finding.op_name == "rpn/nms/pure_callback"
    assert str(finding) == (
        "host callback `pure_callback` at rpn/nms/pure_callback"
    )


def test_require_device_only_names_op_and_suggests_backend():
    findings = host_audit.audit(jax.jit(_with_callback), jnp.ones(3))
    with pytest.raises(
        host_audit.HostRoundTripError,
        match=r"train_step is not device-only: host callback "
        r"`pure_callback` at rpn/nms/pure_callback .*"
        r"--nms=pallas",
    ):
        host_audit.require_device_only(
            findings,
            "train_step",
            lambda f: "use --nms=pallas" if "nms" in f.op_name else "",
        )
    with pytest.raises(
        host_audit.HostRoundTripError, match=r"at rpn/nms/pure_callback$"
    ):
        host_audit.require_device_only(findings, "train_step")
    host_audit.require_device_only([], "train_step")  # no error


def test_guard_catches_implicit_transfer_in_loop():
    step = jax.jit(lambda x: x + 1)
    x = jax.device_put(np.ones(3, np.float32))
    with host_audit.device_only_transfers():
        for _ in range(2):
            x = step(x)  # device -> device: allowed
        explicit = jax.device_get(x)  # explicit: allowed
        # A numpy batch slipped into the step. (Device-to-host reads are
        # guarded too on accelerators; on CPU they are not transfers.)
        with pytest.raises(Exception, match="Disallowed host-to-device"):
            step(np.ones(3, np.float32))
    np.testing.assert_array_equal(explicit, [3, 3, 3])
