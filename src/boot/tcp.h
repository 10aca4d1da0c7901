/*
 * tcp.h — what the TCP rendezvous's files share (tcp.c: the wire and open; tcp_root.c: rank 0; tcp_leaf.c: the
 * others). The star, its frames and its deadlines are described in tcp.c.
 */
#ifndef SY_BOOT_TCP_H
#define SY_BOOT_TCP_H

#include "boot/rendezvous.h"

#include <netinet/in.h>

/* Every message starts with one 24-byte frame, big-endian: magic, type, a, b, length; `length` bytes follow.
 *   HELLO  (rank -> 0)  a = rank, b = world size
 *   DATA   (rank -> 0)  a = rank, b = round; the blob follows
 *   REPLY  (0 -> rank)  a = status, b = round; the concatenation follows (status 0) or the reason (text). */
#define TCP_MAGIC   0x53594254u /* "SYBT" */
#define FRAME_BYTES 24
#define REASON_MAX  1024
enum { MSG_HELLO = 1, MSG_DATA = 2, MSG_REPLY = 3 };

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

/* Rank 0 (tcp_root.c): accepts until every other rank has said hello, then answers each; one round. */
sy_status_t sy__tcp_root_open(sy_boot_t *boot);
sy_status_t sy__tcp_root_round(sy_boot_t *boot, const void *mine, void *all, size_t bytes);
/* The other ranks (tcp_leaf.c): connect (retrying: rank 0 may not listen yet), say hello, wait for the answer;
 * one round. */
sy_status_t sy__tcp_leaf_open(sy_boot_t *boot);
sy_status_t sy__tcp_leaf_round(sy_boot_t *boot, const void *mine, void *all, size_t bytes);

#endif
