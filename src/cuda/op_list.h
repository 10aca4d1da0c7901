/*
 * op_list.h — the one list of what the cuda backend's kernels report: the operations a failed wait or a bad
 * argument names in the error slot (and the trace names them by), and the phases the trace marks. Included with X
 * defined; backend.h generates the enums, comm.cu and trace.cu the names (error details, Chrome trace JSON,
 * which tools/gpu-check.sh and tools/trace-summary.py read back as "<op> <phase>").
 *
 * SY_CUDA_OP(id, trace name, what the error detail says)
 * SY_CUDA_OP_LABELS(id, who, expected, saw): the words the detail gives the error slot's peer, expected and seen
 * fields where they are not a peer rank and a wait's values ("peer v: expected x, saw y"): e.g. a bad expert id's
 * "token t: k x, id y" (who "" leaves that field out). Optional for an includer: empty unless defined.
 */
#ifndef SY_CUDA_OP_LABELS
#define SY_CUDA_OP_LABELS(id, who, expected, saw)
#define SY__CUDA_OP_LABELS_EMPTY
#endif
SY_CUDA_OP(OP_BARRIER, "barrier", "barrier")
SY_CUDA_OP(OP_SIGNAL_WAIT, "signal_wait", "signal_wait")
SY_CUDA_OP(OP_A2A_READY, "alltoallv", "alltoallv (waiting for the receiver to enter the call)")
SY_CUDA_OP(OP_A2A_DATA, "alltoallv", "alltoallv (waiting for a sender's data)")
SY_CUDA_OP(OP_A2A_MISMATCH, "alltoallv",
           "alltoallv (a pair disagrees on its byte count; expected = this rank's, saw = the peer's)")
SY_CUDA_OP(OP_ATTN_READY, "attn", "attention dispatch (waiting for the receiver to enter the call)")
SY_CUDA_OP(OP_ATTN_DATA, "attn", "attention dispatch (waiting for a sender's rows)")
SY_CUDA_OP(OP_ATTN_MISMATCH, "attn",
           "attention dispatch: this rank and the peer hold plans of different descriptions, or call with other "
           "directions or row sizes (expected = this rank's call fingerprint, saw = the peer's); no rows were sent "
           "to the peer")
SY_CUDA_OP(OP_ATTN_MISMATCH_RECV, "attn",
           "attention dispatch: the peer found its plan or call differs from this rank's and sent no rows "
           "(expected = this rank's call fingerprint)")
SY_CUDA_OP(OP_MOE_IDS, "moe dispatch_send",
           "moe dispatch_send: an expert id outside [-1, num_experts) or repeated within its token; the entry was "
           "treated as -1")
SY_CUDA_OP_LABELS(OP_MOE_IDS, "token", "k", "id")
SY_CUDA_OP(OP_MOE_DISPATCH_SEND, "moe dispatch_send", "moe dispatch_send")
SY_CUDA_OP(OP_MOE_DISPATCH_RECV, "moe dispatch_recv",
           "moe dispatch_recv (waiting for a source's tokens; expected/saw = call numbers)")
SY_CUDA_OP(OP_MOE_SLOTS, "moe dispatch_recv",
           "moe dispatch_recv: a local expert's rows past its slots (the library's own error: senders and receiver "
           "disagree on the counts)")
SY_CUDA_OP_LABELS(OP_MOE_SLOTS, "local expert", "slots", "rows")
SY_CUDA_OP(OP_MOE_MESSAGES, "moe dispatch_recv",
           "moe dispatch_recv: a source's message count past the most a source sends (the library's own error); its "
           "messages were left out")
SY_CUDA_OP_LABELS(OP_MOE_MESSAGES, "source", "most", "count")
SY_CUDA_OP(OP_MOE_COMBINE_SEND, "moe combine_send", "moe combine_send")
SY_CUDA_OP(OP_MOE_COMBINE_RECV, "moe combine_recv", "moe combine_recv (waiting for an expert rank's outputs)")
SY_CUDA_OP(OP_MOE_COMBINE_ARGS, "moe combine_recv",
           "moe combine_recv: num_tokens or expert_ids differ from this rank's dispatch (entry -1: num_tokens, "
           "else the id at token * top_k + k; expected = the dispatch's, saw = the combine's)")
SY_CUDA_OP_LABELS(OP_MOE_COMBINE_ARGS, "entry", "expected", "saw")
SY_CUDA_OP(OP_MOE_HT_IDS, "moe_ht layout",
           "moe_ht layout: an expert id outside [-1, num_experts) or repeated within its token, the first such in "
           "(token, k) order; the bad entries were treated as -1")
SY_CUDA_OP_LABELS(OP_MOE_HT_IDS, "token", "k", "id")
SY_CUDA_OP(OP_MOE_HT_LAYOUT_SYNC, "moe_ht layout",
           "moe_ht layout (a block waiting at the layout kernel's grid barrier for its other blocks; expected/saw = "
           "arrivals)")
SY_CUDA_OP_LABELS(OP_MOE_HT_LAYOUT_SYNC, "block", "expected", "saw")
SY_CUDA_OP(OP_MOE_HT_EXCHANGE, "moe_ht layout",
           "moe_ht layout (waiting for a rank's counts, or for its ack of the "
           "previous layout's; expected/saw = layout numbers)")
SY_CUDA_OP(OP_MOE_HT_HANDLE, "moe_ht",
           "moe_ht: the handle was not written by this object's layout, or num_tokens differs from its layout's "
           "(expected = the handle's num_tokens or object, saw = the call's)")
SY_CUDA_OP_LABELS(OP_MOE_HT_HANDLE, "", "expected", "saw")
SY_CUDA_OP(OP_MOE_HT_NOT_DISPATCHED, "moe_ht combine",
           "moe_ht combine: no dispatch recorded rows in this handle, or it had another recv.expert_stride")
SY_CUDA_OP_LABELS(OP_MOE_HT_NOT_DISPATCHED, "dispatched", "its stride", "the call's stride")
SY_CUDA_OP(OP_MOE_HT_ROWS, "moe_ht dispatch",
           "moe_ht dispatch: the layout needs more rows than recv.rows, or a local expert more than "
           "recv.expert_stride (local expert -1: recv.rows); no row was written")
SY_CUDA_OP_LABELS(OP_MOE_HT_ROWS, "local expert", "bound", "needed")
SY_CUDA_OP(OP_MOE_HT_SEND, "moe_ht send", "moe_ht (a sender waiting for room in a receiver's ring)")
SY_CUDA_OP(OP_MOE_HT_RECV, "moe_ht recv", "moe_ht (a receiver waiting for a sender's messages)")
SY_CUDA_OP(
    OP_MOE_HT_INBOX, "moe_ht inbox",
    "moe_ht dispatch with a receive arena (a sender waiting for a receiver's row bases of this call; expected/saw "
    "= dispatch numbers)")

/* SY_CUDA_PHASE(id, trace name): thread 0 of a block marks each phase's begin and end (SY_TRACE_FILE). */
SY_CUDA_PHASE(PH_KERNEL, "kernel")         /* the whole kernel, per block */
SY_CUDA_PHASE(PH_POST_READY, "post ready") /* receiver tells senders it entered the call */
SY_CUDA_PHASE(PH_WAIT_READY, "wait ready") /* sender waits for a receiver's ready */
SY_CUDA_PHASE(PH_COPY, "copy")             /* one piece: stores or put; MoE: a block's tokens */
SY_CUDA_PHASE(PH_SIGNAL, "signal")         /* fence and counter update after the data */
SY_CUDA_PHASE(PH_WAIT_DATA, "wait data")   /* receiver waits for the senders' data */
SY_CUDA_PHASE(PH_WAIT, "wait")             /* a barrier's or signal wait's wait */
SY_CUDA_PHASE(PH_ROUTE, "route")           /* MoE dispatch: every unit's destinations and message indices */
SY_CUDA_PHASE(PH_POST, "post-process")     /* MoE dispatch_recv: messages into the caller's expert buffers */
SY_CUDA_PHASE(PH_REDUCE, "reduce")         /* MoE combine_recv: the sum per token */
SY_CUDA_PHASE(PH_LOCAL, "local")           /* MoE one-call dispatch: own entries into the expert buffers */

#ifdef SY__CUDA_OP_LABELS_EMPTY
#undef SY_CUDA_OP_LABELS
#undef SY__CUDA_OP_LABELS_EMPTY
#endif
