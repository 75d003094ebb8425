"""Built-in weight transports (``actor_rollout_ref.rollout.checkpoint_engine.backend``): naive and delta."""

from rlcore.hookspecs import hookimpl


@hookimpl
def register_weight_transports(register):
    """Register the full and the delta transport."""
    register("naive", "rlcore.rollout.transport:NaiveTransport", description="every tensor, every sync")
    register(
        "delta",
        "rlcore.rollout.transport:DeltaTransport",
        description="only the elements changed since the last sync, in the engine's dtype, a checksum per bucket",
    )
