"""config.json fields that do not change a decode step's timing in hwsim, with why: they are
read and listed (`hwsim run --dry-run`, `hwsim model import`), never refused. Every other field
an architecture does not read is refused, naming it (a field hwsim does not know may change
the compute)."""

from __future__ import annotations

_TOKENS = "a tokenizer or generation setting"
_TRAINING = "a training-only setting"
_SCALAR = "a constant scale or epsilon inside a kernel hwsim times by its shape"
_ROPE = "rotary-embedding parameters: the same elementwise work whatever their values"
_META = "file metadata"

IGNORED: dict[str, str] = {
    **dict.fromkeys(("bos_token_id", "eos_token_id", "pad_token_id", "sep_token_id", "decoder_start_token_id",
                     "tokenizer_class", "id2label", "label2id", "bad_words_ids", "temperature", "top_p", "top_k",
                     "max_length", "do_sample", "num_beams", "chat_template", "image_token_index"), _TOKENS),
    **dict.fromkeys(("attention_dropout", "hidden_dropout", "dropout", "embd_pdrop", "resid_pdrop",
                     "attn_pdrop", "initializer_range", "output_router_logits", "router_aux_loss_coef",
                     "aux_loss_alpha", "seq_aux", "router_z_loss_coef", "router_jitter_noise",
                     "input_jitter_noise", "use_cache", "pretraining_tp", "ep_size",
                     "initial_context_length", "problem_type", "finetuning_task"), _TRAINING),
    **dict.fromkeys(("rms_norm_eps", "layer_norm_eps", "norm_topk_prob", "routed_scaling_factor",
                     "embedding_multiplier", "attention_multiplier", "residual_multiplier", "logits_scaling",
                     "swiglu_limit", "clip_qkv", "attention_scale", "router_temperature"), _SCALAR),
    **dict.fromkeys(("rope_theta", "rope_scaling", "rope_parameters", "partial_rotary_factor",
                     "original_max_position_embeddings", "rope_interleave", "rotary_pct"), _ROPE),
    **dict.fromkeys(("architectures", "auto_map", "transformers_version", "_name_or_path", "name_or_path",
                     "torch_dtype", "dtype", "use_bfloat16", "return_dict", "output_attentions",
                     "output_hidden_states", "torchscript", "_attn_implementation_autoset",
                     "attn_implementation", "is_decoder", "tie_encoder_decoder", "task_specific_params",
                     "_commit_hash", "unsloth_version", "unsloth_fixed", "keys_to_ignore_at_inference"),
                   _META),
}

# Read by the importer but with no timing effect (each is also named where it is read)
NOTED = {
    "tie_word_embeddings": "embedding table and LM head share one tensor: counted once in params.total "
                           "(the LM head is read every step either way)",
    "hidden_act": "the gated MLP's activation: one elementwise op whichever",
    "max_position_embeddings": "checked against the scenario's longest context",
    "num_nextn_predict_layers": "the MTP module: counted in params.mtp, run by workload.speculative.method: mtp",
    "torch_dtype": "the checkpoint's dtype; unquantized weights are timed as bf16",
}


def reason(key: str) -> str | None:
    return NOTED.get(key) or IGNORED.get(key)
