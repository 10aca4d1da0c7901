/*
 * tcp.h — what the TCP rendezvous's files share (tcp.c: the wire and open; tcp_auth.c: the secret's proofs;
 * tcp_accept.c: rank 0's open; tcp_root.c: rank 0's rounds; tcp_leaf.c: the others). The star, its frames,
 * the handshake and its deadlines are described in tcp.c.
 */
#ifndef SY_BOOT_TCP_H
#define SY_BOOT_TCP_H

#include "boot/rendezvous.h"

#include <netinet/in.h>

/* Every message starts with one 24-byte frame, big-endian: magic, type, a, b, length; `length` bytes follow.
 *   CHALLENGE (0 -> rank)  a = TCP_VERSION, b = 0; the root's nonce follows (TCP_NONCE_BYTES)
 *   HELLO     (rank -> 0)  a = rank, b = world size; nothing (no secret) or the rank's nonce and proof follow
 *   DATA      (rank -> 0)  a = rank, b = round; the blob follows
 *   REPLY     (0 -> rank)  a = status, b = round; the concatenation follows (status 0) or the reason (text);
 *                          at open, status 0 carries rank 0's proof when it holds a secret. */
#define TCP_MAGIC   0x53594254u /* "SYBT" */
#define TCP_VERSION 2
#define FRAME_BYTES 24
#define REASON_MAX  1024
enum { MSG_HELLO = 1, MSG_DATA = 2, MSG_REPLY = 3, MSG_CHALLENGE = 4 };

#define TCP_NONCE_BYTES 16
#define TCP_PROOF_BYTES 32                                  /* HMAC-SHA-256 */
#define TCP_HELLO_AUTH  (TCP_NONCE_BYTES + TCP_PROOF_BYTES) /* a hello's body when the rank holds a secret */

#define HOST_TEXT (INET6_ADDRSTRLEN + 8) /* a numeric address */

typedef struct frame {
  uint32_t magic, type;
  int32_t a, b;
  uint64_t length;
} frame_t;

void sy__tcp_frame_encode(const frame_t *f, unsigned char *out);
void sy__tcp_frame_decode(const unsigned char *in, frame_t *f);

typedef enum io_result { TCP_IO_OK, TCP_IO_TIMEOUT, TCP_IO_CLOSED, TCP_IO_INPUT } tcp_io_t;
/* Sends all of buf by the deadline. watch_input: stop early (TCP_IO_INPUT) if the peer has something to say. */
tcp_io_t sy__tcp_send_all(int fd, const void *buf, size_t len, uint64_t deadline, int watch_input, int *err);
tcp_io_t sy__tcp_recv_all(int fd, void *buf, size_t len, uint64_t deadline, int *err);
/* TCP_NODELAY and nonblocking. */
void sy__tcp_socket_setup(int fd);
/* The peer's numeric address, or "?". */
void sy__tcp_peer_name(int fd, char *out, size_t bytes);
/* A rank other than 0 waits this much past its own bound for rank 0's answer: rank 0 gives up at the same
 * moment and its answer then says which ranks were missing, which only rank 0 can know. */
uint64_t sy__tcp_verdict_deadline(uint64_t deadline, uint64_t timeout_ms);

/* The shared secret (tcp_auth.c). Proofs bind both nonces, the rank and the world size; the two directions
 * use different labels, so one side's proof never serves as the other's. */
void sy__tcp_sha256(const void *data, size_t len, unsigned char out[32]);
void sy__tcp_hmac_sha256(const void *key, size_t key_len, const void *msg, size_t len, unsigned char out[32]);
typedef enum tcp_proof_side { TCP_PROOF_LEAF, TCP_PROOF_ROOT } tcp_proof_side_t;
void sy__tcp_proof(const char *secret, tcp_proof_side_t side, const unsigned char *root_nonce,
                   const unsigned char *leaf_nonce, int rank, int world, unsigned char out[TCP_PROOF_BYTES]);
/* 1 when equal; the time taken does not depend on where they differ. */
int sy__tcp_equal_ct(const unsigned char *a, const unsigned char *b, size_t len);
/* Unpredictable bytes (getrandom, else /dev/urandom); 0 on success. */
int sy__tcp_random(unsigned char *out, size_t len);

/* Rank 0 after a failure: tells every connected rank of fds[0..count) why, waits briefly for them to hang up,
 * closes them all (sets them to -1). */
void sy__tcp_root_fail(int *fds, int count, sy_status_t status, uint64_t round, const char *reason);
/* Rank 0 (tcp_accept.c): listens on its own address, accepts until every other rank has said hello, then
 * answers each. */
sy_status_t sy__tcp_root_open(sy_boot_t *boot);
/* Rank 0 (tcp_root.c): one round. */
sy_status_t sy__tcp_root_round(sy_boot_t *boot, const void *mine, void *all, size_t bytes);
/* The other ranks (tcp_leaf.c): connect (retrying: rank 0 may not listen yet), take the challenge, say hello,
 * wait for the answer (and check rank 0's proof when this rank holds a secret); one round. */
sy_status_t sy__tcp_leaf_open(sy_boot_t *boot);
sy_status_t sy__tcp_leaf_round(sy_boot_t *boot, const void *mine, void *all, size_t bytes);

#endif
