/*
 * env_list.h — the one list of environment variables switchyard reads. Included with SY_ENV_ID_ defined
 * (internal.h builds the id enum from it; env.c builds the table sy-info -e prints).
 * Columns: name, type, default, what it does.
 */
SY_ENV_ID_(SY_DEBUG, SY_ENV_STRING, "WARN", "log level: NONE, WARN, INFO or TRACE")
SY_ENV_ID_(
    SY_DEBUG_FILE, SY_ENV_STRING, "",
    "write the log here instead of stderr; %h host, %p pid, %r rank (a file per rank, host-backend threads included)")
SY_ENV_ID_(SY_BACKEND, SY_ENV_STRING, "auto", "backend when the config says auto: auto, cuda or host")
SY_ENV_ID_(SY_TIMEOUT_MS, SY_ENV_INT, "5000", "bound on every wait for a peer, in milliseconds")
SY_ENV_ID_(SY_BOOT_TIMEOUT_MS, SY_ENV_INT, "60000", "bound on the rendezvous at init, in milliseconds")
SY_ENV_ID_(SY_HEAP_SIZE, SY_ENV_SIZE, "1G", "symmetric memory reserved per rank (K/M/G suffixes); 0 is rejected")
SY_ENV_ID_(SY_FORCE_PUT, SY_ENV_BOOL, "0", "use NVSHMEM puts even to peers reachable by load/store")
SY_ENV_ID_(SY_RANK, SY_ENV_INT, "-1", "this process's rank (set by syrun)")
SY_ENV_ID_(SY_WORLD_SIZE, SY_ENV_INT, "-1", "number of ranks (set by syrun)")
SY_ENV_ID_(SY_LOCAL_RANK, SY_ENV_INT, "-1", "rank among the processes of this node (set by syrun)")
SY_ENV_ID_(SY_LOCAL_SIZE, SY_ENV_INT, "-1", "processes on this node (set by syrun)")
SY_ENV_ID_(SY_DEVICE, SY_ENV_INT, "-1", "CUDA device of this rank (set by syrun --gpus); -1: local rank")
SY_ENV_ID_(SY_BOOT_DIR, SY_ENV_STRING, "", "private directory for the rendezvous (set by syrun)")
SY_ENV_ID_(SY_BOOT_ADDR, SY_ENV_STRING, "", "rendezvous host for multi-node runs; default MASTER_ADDR")
SY_ENV_ID_(SY_BOOT_PORT, SY_ENV_INT, "0", "rendezvous TCP port; 0: MASTER_PORT + 1 (MASTER_PORT is torch's)")
SY_ENV_ID_(SY_BOOT_SECRET, SY_ENV_STRING, "",
           "TCP rendezvous: a secret shared by every rank; rank 0 refuses ranks that cannot prove it and the ranks "
           "refuse a rank 0 that cannot (never sent, never logged)")
SY_ENV_ID_(SY_A2A_BLOCKS, SY_ENV_INT, "0", "all-to-all: thread blocks per launch; 0 picks from the SM count")
SY_ENV_ID_(SY_A2A_CHUNK, SY_ENV_SIZE, "64K",
           "all-to-all, attention: largest piece of one pair's bytes with its own signal (small pairs are cut finer, "
           "to 8K); same on every rank")
SY_ENV_ID_(SY_A2A_CE, SY_ENV_SIZE, "64M",
           "all-to-all at world size 1: a call's bytes, when at least this many, go by cudaMemcpyAsync (a copy "
           "engine) instead of the kernel's stores, which frees the SMs; 0: never (bench/NOTES.md, \"copy engines\")")
SY_ENV_ID_(SY_PIECE_ORDER, SY_ENV_STRING, "auto",
           "all-to-all, attention, calls with more pieces than blocks: blocks draw tickets (tickets) or keep a static "
           "share each (static); auto: tickets, but static for the all-to-all at world size 1 (bench/NOTES.md)")
SY_ENV_ID_(SY_TRACE_FILE, SY_ENV_STRING, "",
           "write per-phase device timestamps as Chrome trace JSON here at destroy; %r rank, %p pid")
SY_ENV_ID_(SY_TRACE_EVENTS, SY_ENV_INT, "262144", "trace buffer capacity in events (32 bytes each)")
SY_ENV_ID_(SY_PDL, SY_ENV_BOOL, "1",
           "launch every kernel of the library with programmatic dependent launch (a kernel starts while the one "
           "before it ends)")
SY_ENV_ID_(SY_GRAPH_NODE_PRIORITY, SY_ENV_BOOL, "1",
           "the graph cache's graphs run each kernel at the priority of the stream it was captured from (0: every "
           "kernel at the priority of the stream the graph is launched into, CUDA's default)")
SY_ENV_ID_(SY_MOE_FUSED, SY_ENV_BOOL, "1",
           "sy_moe_dispatch / sy_moe_combine run their two halves as one kernel (0: two launches)")
SY_ENV_ID_(SY_HT_OWN_QUEUE, SY_ENV_INT, "-1",
           "high-throughput MoE dispatch kernel: this rank's own tokens' rows taken in chunks from one queue by "
           "whichever block has nothing else to do (1), or a static split of each channel's tokens (0, "
           "SY_HT_RECV_OWN); -1: the queue, but the static split for the combine's backward at world size 1 "
           "(measured faster there, bench/NOTES.md)")
SY_ENV_ID_(SY_HT_RECV_OWN, SY_ENV_INT, "-1",
           "high-throughput MoE dispatch with SY_HT_OWN_QUEUE=0: the share of a channel's own tokens (in 1/1024) "
           "whose rows its receiving block writes, the sending block the rest; -1: half at world size 1, else "
           "balanced against the messages the receiving block expands (bench/NOTES.md)")
SY_ENV_ID_(SY_HT_PREQUANT, SY_ENV_INT, "-1",
           "high-throughput MoE dispatch, FP8 wires: quantise the tokens in a kernel of their own on the "
           "dispatch's SMs first, into the object's device memory, then send the E4M3 bytes as the given wire "
           "does (1), or in the dispatch kernel as each token is sent (0); -1: 1 from world size 2, 0 at world size "
           "1 (measured faster each, bench/NOTES.md); a pulled dispatch (SY_HT_PULL) always quantises first, into "
           "symmetric memory")
SY_ENV_ID_(SY_HT_SCALE_HINT, SY_ENV_INT, "-1",
           "high-throughput MoE dispatch, FP8 wires: the rows' scales stored into the group-major recv.scales under "
           "an L2 evict_last policy (1) or plainly (0); -1: 1 where the SM budget is at least half the GPU's SMs "
           "(measured faster at 132 SMs, slower at 16, bench/NOTES.md); never with SY_MOE_HT_SCALES_ROW_MAJOR")
SY_ENV_ID_(SY_HT_OWNER_AHEAD, SY_ENV_BOOL, "1",
           "high-throughput MoE combine (and the dispatch's backward): each channel's owner block plans the next "
           "batch of tokens and waits for its partials with one warp while the others sum the batch before (1), or "
           "plans, waits and sums each batch in turn (0, for measuring; bench/NOTES.md)")
SY_ENV_ID_(SY_HT_ROLES, SY_ENV_INT, "-1",
           "high-throughput MoE data kernels: a channel's two roles (the dispatch's senders and receivers, the "
           "combine's experts' side and owners) on one block's warps at once, as many channels as SMs (1), or on two "
           "blocks of their own, half as many channels (0); -1: 1 at world size 2 with config.num_sms at most 48 "
           "and from world size 3 with at most 16 (at world 4 faster at 16 SMs, not at 24 to 64; at world 2 faster "
           "at 24 to 48, not at 64; by warps the rings take twice the symmetric memory), else 0 (bench/NOTES.md)")
SY_ENV_ID_(SY_HT_PULL, SY_ENV_INT, "-1",
           "high-throughput MoE dispatch from world size 2: each rank's tokens, ids and weights copied into symmetric "
           "memory (max_tokens x (2 hidden + 12 top_k) more bytes of it a rank), and every rank's blocks pull the "
           "tokens that have experts there by bulk copies, with no ring (any positive value; needs every peer load/"
           "store reachable); 0: the senders push the payloads through the rings; -1 (auto): pull where every rank "
           "reaches every peer by load/store and has the symmetric heap for it (a row of at most 64 KiB, at most "
           "4,096 experts), else push (at world 2, 16 SMs, "
           "4,096 tokens the pull took 560 us against 648, bench/NOTES.md, run 62)")
SY_ENV_ID_(SY_HT_PULL_SMS, SY_ENV_INT, "64",
           "high-throughput MoE dispatch pulled by default (SY_HT_PULL unset or negative): a BF16 or given-FP8 "
           "dispatch, whose tokens are copied into symmetric memory before the kernel, pulls at call budgets (sy_moe_"
           "ht_set_num_sms) up to this many SMs and pushes above (world 2: the pull faster by 2-13% in event time to "
           "64 SMs, 12% slower at 132; FP8 quantised in the kernel pulls at every budget; bench/NOTES.md, run 63); "
           "every rank must set it alike")
SY_ENV_ID_(SY_HT_PULL_OVERLAP, SY_ENV_INT, "0",
           "high-throughput MoE dispatch pulled with a BF16 or given-FP8 wire: copy the rank's tokens into symmetric "
           "memory on a side stream beside the pull kernel, whose blocks take their own channels first from the "
           "caller's tokens (1; experimental, not yet timed), or before the kernel on the call's stream (0)")
SY_ENV_ID_(SY_HT_SEND_WARPS, SY_ENV_INT, "6",
           "high-throughput MoE dispatch kernel (the dispatch and the combine's backward) with SY_HT_ROLES=1: the "
           "sending warps of a block's 16, 2 to 14; the rest receive (6 measured best of 4-8 for the two calls "
           "together, bench/NOTES.md)")
SY_ENV_ID_(SY_HT_EXPERT_WARPS, SY_ENV_INT, "8",
           "high-throughput MoE combine kernel (the combine and the dispatch's backward) with SY_HT_ROLES=1: the "
           "warps of a block's 16 on the experts' side, 2 to 14; the rest sum as the owners (8 measured best for "
           "the combine of 5-12, bench/NOTES.md)")
SY_ENV_ID_(SY_HT_PROBE, SY_ENV_STRING, "",
           "high-throughput MoE: write where each block of the last dispatch and combine calls spent its time here "
           "at destroy (%r rank; for measuring, bench/NOTES.md)")
SY_ENV_ID_(SY_MOE_DIRECT, SY_ENV_STRING, "auto",
           "one-kernel sy_moe_dispatch: this rank's own tokens go straight into its expert buffers (1), through its "
           "dispatch region (0), or auto: straight with SY_MOE_PER_EXPERT from SMs / 2 tokens on")
