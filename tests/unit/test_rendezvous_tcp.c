/*
 * test_rendezvous_tcp.c — what rank 0 of the TCP rendezvous (src/boot/tcp_accept.c) lets in, and where it
 * listens: idle connections opened before the real ranks (issue 18's tcp_idle.sh) hold nobody up and are dropped
 * at their hello deadline; garbage, out-of-range ranks, a rank taken twice and a wrong world size are refused at
 * once, logged once with the peer's address, and the real rank's later hello still goes through;
 * SY_BOOT_SECRET: the right one is accepted, a wrong or missing one refused either way round, a rank 0 that
 * cannot prove it is refused by the ranks, and the secret is never sent nor logged; rank 0 listens only at its
 * configured address (and says so when that address is not this host's). SHA-256 and HMAC against published
 * vectors. Ranks are threads; raw sockets play the strays.
 */
#include "rendezvous_test.h"

#include "boot/tcp.h"

#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>

static const char secret_a[] = "alpha-Secret-71x", secret_b[] = "bravo-Secret-93y";

/* A blocking connection to ip:port, retried while nothing listens there yet (up to give_up_s); -1 if none. */
static int raw_connect(const char *ip, int port, double give_up_s) {
  double end = now_s() + give_up_s;
  for (;;) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)port);
    inet_pton(AF_INET, ip, &a.sin_addr);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) == 0) return fd;
    int err = errno;
    close(fd);
    if (err != ECONNREFUSED || now_s() > end) return -1;
    usleep(5000);
  }
}

/* Reads up to len bytes within timeout_ms; returns how many (fewer at EOF or at the timeout). */
static size_t raw_read(int fd, void *buf, size_t len, int timeout_ms) {
  size_t got = 0;
  double end = now_s() + timeout_ms / 1e3;
  while (got < len) {
    int left = (int)((end - now_s()) * 1e3);
    struct pollfd pfd = {fd, POLLIN, 0};
    if (left <= 0 || poll(&pfd, 1, left) <= 0) break;
    ssize_t n = recv(fd, (char *)buf + got, len - got, 0);
    if (n <= 0) break;
    got += (size_t)n;
  }
  return got;
}

/* Seconds until rank 0 closes fd (what it sends is read and dropped), or -1 if not within timeout_ms. */
static double seconds_to_eof(int fd, int timeout_ms) {
  double t0 = now_s(), end = t0 + timeout_ms / 1e3;
  char sink[256];
  for (;;) {
    int left = (int)((end - now_s()) * 1e3);
    struct pollfd pfd = {fd, POLLIN, 0};
    if (left <= 0 || poll(&pfd, 1, left) <= 0) return -1;
    ssize_t n = recv(fd, sink, sizeof sink, 0);
    if (n <= 0) return now_s() - t0;
  }
}

/* Reads rank 0's challenge; returns 1 when it is one (its nonce into nonce). */
static int read_challenge(int fd, unsigned char nonce[TCP_NONCE_BYTES]) {
  unsigned char in[FRAME_BYTES + TCP_NONCE_BYTES];
  if (raw_read(fd, in, sizeof in, 5000) != sizeof in) return 0;
  frame_t f;
  sy__tcp_frame_decode(in, &f);
  memcpy(nonce, in + FRAME_BYTES, TCP_NONCE_BYTES);
  return f.magic == TCP_MAGIC && f.type == MSG_CHALLENGE && f.a == TCP_VERSION && f.length == TCP_NONCE_BYTES;
}

static int count_of(const char *text, const char *needle) {
  int n = 0;
  for (const char *p = strstr(text, needle); p; p = strstr(p + 1, needle)) n++;
  return n;
}

static void test_sha256_hmac(void) {
  static const struct {
    const char *msg, *hex;
  } sha[] = {{"", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
             {"abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"},
             {"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq", /* 56 bytes: padding takes a block */
              "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"}};
  char hex[65];
  unsigned char out[32];
  for (int i = 0; i < 3; i++) {
    sy__tcp_sha256(sha[i].msg, strlen(sha[i].msg), out);
    for (int j = 0; j < 32; j++) snprintf(hex + 2 * j, 3, "%02x", out[j]);
    CHECK_EQ_STR(hex, sha[i].hex);
  }
  /* RFC 4231 test cases 1, 2 and 6 (a key longer than a block). */
  unsigned char key1[20], key6[131];
  memset(key1, 0x0b, sizeof key1);
  memset(key6, 0xaa, sizeof key6);
  static const char *msg6 = "Test Using Larger Than Block-Size Key - Hash Key First";
  const struct {
    const void *key;
    size_t key_len;
    const char *msg, *hex;
  } hmac[] = {
      {key1, 20, "Hi There", "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7"},
      {"Jefe", 4, "what do ya want for nothing?", "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"},
      {key6, 131, msg6, "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"}};
  for (int i = 0; i < 3; i++) {
    sy__tcp_hmac_sha256(hmac[i].key, hmac[i].key_len, hmac[i].msg, strlen(hmac[i].msg), out);
    for (int j = 0; j < 32; j++) snprintf(hex + 2 * j, 3, "%02x", out[j]);
    CHECK_EQ_STR(hex, hmac[i].hex);
  }
  /* Proofs: each direction, rank and world size gives its own. */
  unsigned char n1[TCP_NONCE_BYTES] = {1}, n2[TCP_NONCE_BYTES] = {2}, p[4][TCP_PROOF_BYTES];
  sy__tcp_proof(secret_a, TCP_PROOF_LEAF, n1, n2, 1, 2, p[0]);
  sy__tcp_proof(secret_a, TCP_PROOF_ROOT, n1, n2, 1, 2, p[1]);
  sy__tcp_proof(secret_a, TCP_PROOF_LEAF, n1, n2, 1, 3, p[2]);
  sy__tcp_proof(secret_b, TCP_PROOF_LEAF, n1, n2, 1, 2, p[3]);
  for (int i = 0; i < 4; i++)
    for (int j = i + 1; j < 4; j++) CHECK(!sy__tcp_equal_ct(p[i], p[j], TCP_PROOF_BYTES));
  CHECK(sy__tcp_equal_ct(p[0], p[0], TCP_PROOF_BYTES));
}

/* Issue 18's tcp_idle.sh: more idle connections than the world has ranks reach rank 0's port before rank 1.
 * Rank 1 gets through at once (not after the idle ones' 2 s hello deadline), and each idle connection got a
 * challenge and then a close. */
static void test_idle_connections(void) {
  job_t job = base_job(VIA_TCP, NULL, free_port(), 2);
  job.rounds = 4;
  rank_run_t runs[2];
  pthread_t threads[2];
  const claim_t rank0 = {0, 0, NULL, 0}, rank1 = {1, 0, NULL, 0};
  start_claims(&job, 1, &rank0, runs, threads);
  int idle[4];
  for (int i = 0; i < 4; i++) idle[i] = raw_connect("127.0.0.1", job.port, 10);
  start_claims(&job, 1, &rank1, runs + 1, threads + 1);
  join_claims(2, threads);
  check_all_ok(runs, 2, "idle connections first");
  CHECK(runs[1].seconds < 1.8);
  for (int i = 0; i < 4; i++) {
    unsigned char nonce[TCP_NONCE_BYTES];
    CHECK(idle[i] >= 0);
    CHECK(read_challenge(idle[i], nonce));
    CHECK(seconds_to_eof(idle[i], 5000) >= 0);
    close(idle[i]);
  }
}

/* A connection that says nothing is dropped at its hello deadline (min(2 s, half the boot timeout)), logged
 * with its address, while rank 0 goes on waiting; rank 1 arriving after that gets in. */
static void test_idle_dropped(void) {
  job_t job = base_job(VIA_TCP, NULL, free_port(), 2);
  job.timeout_ms = 4000;
  job.rounds = 2;
  rank_run_t runs[2];
  pthread_t threads[2];
  const claim_t rank0 = {0, 0, NULL, 0}, rank1 = {1, 0, NULL, 0};
  log_capture_start();
  start_claims(&job, 1, &rank0, runs, threads);
  int idle = raw_connect("127.0.0.1", job.port, 10);
  double dropped_after = seconds_to_eof(idle, 3500);
  start_claims(&job, 1, &rank1, runs + 1, threads + 1);
  join_claims(2, threads);
  char *log = log_capture_end();
  check_all_ok(runs, 2, "idle connection dropped");
  CHECK(dropped_after > 1.5 && dropped_after < 3.5);
  CHECK_LOG_HAS(log, "[rank 0] sy warn: rendezvous: rank 0 dropped a connection from 127.0.0.1: no hello in time");
  close(idle);
}

/* Sends `bytes` after the challenge and expects rank 0's refusal, at once, with a reason containing `needle`. */
static void expect_refused(int port, const void *bytes, size_t len, const char *needle) {
  int fd = raw_connect("127.0.0.1", port, 10);
  unsigned char nonce[TCP_NONCE_BYTES], head[FRAME_BYTES];
  CHECK(fd >= 0 && read_challenge(fd, nonce));
  double t0 = now_s();
  CHECK(send(fd, bytes, len, MSG_NOSIGNAL) == (ssize_t)len);
  CHECK(raw_read(fd, head, FRAME_BYTES, 5000) == FRAME_BYTES);
  frame_t f;
  sy__tcp_frame_decode(head, &f);
  CHECK(f.magic == TCP_MAGIC && f.type == MSG_REPLY);
  CHECK_STATUS(f.a, SY_ERR_BOOTSTRAP);
  char reason[REASON_MAX + 1] = "";
  size_t got = f.length < REASON_MAX ? raw_read(fd, reason, (size_t)f.length, 5000) : 0;
  reason[got] = '\0';
  if (!strstr(reason, needle)) fprintf(stderr, "refusal \"%s\" lacks \"%s\"\n", reason, needle);
  CHECK(strstr(reason, needle) != NULL);
  CHECK(seconds_to_eof(fd, 5000) >= 0);
  CHECK(now_s() - t0 < 1.5); /* refused at once, not at the 2 s hello deadline */
  close(fd);
}

/* Garbage, a rank out of range and a wrong world size are each refused at once and logged once with the peer's
 * address; the real rank 1 then gets in. */
static void test_bad_hellos(void) {
  job_t job = base_job(VIA_TCP, NULL, free_port(), 2);
  job.rounds = 2;
  rank_run_t runs[2];
  pthread_t threads[2];
  const claim_t rank0 = {0, 0, NULL, 0}, rank1 = {1, 0, NULL, 0};
  log_capture_start();
  start_claims(&job, 1, &rank0, runs, threads);
  static const char http[] = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
  expect_refused(job.port, http, sizeof http - 1, "is not a switchyard rank");
  unsigned char hello[FRAME_BYTES];
  frame_t f = {TCP_MAGIC, MSG_HELLO, 5, 2, 0};
  sy__tcp_frame_encode(&f, hello);
  expect_refused(job.port, hello, sizeof hello, "says it is rank 5, outside 1..1");
  f = (frame_t){TCP_MAGIC, MSG_HELLO, 1, 3, 0};
  sy__tcp_frame_encode(&f, hello);
  expect_refused(job.port, hello, sizeof hello, "rank 1 (from 127.0.0.1) has world size 3, rank 0 has 2");
  start_claims(&job, 1, &rank1, runs + 1, threads + 1);
  join_claims(2, threads);
  char *log = log_capture_end();
  check_all_ok(runs, 2, "bad hellos first");
  CHECK_EQ_INT(count_of(log, "rank 0 refused a hello: a process from 127.0.0.1 is not a switchyard rank"), 1);
  CHECK_EQ_INT(count_of(log, "rank 0 refused a hello: a process from 127.0.0.1 says it is rank 5, outside"), 1);
  CHECK_EQ_INT(count_of(log, "rank 0 refused a hello: rank 1 (from 127.0.0.1) has world size 3"), 1);
}

/* Two threads claim rank 1 (world 3), and one claims the right rank but the wrong world size: rank 0 keeps the
 * first rank 1, refuses the second and the wrong world at once (each fails with SY_ERR_BOOTSTRAP and the reason),
 * and the job goes on when rank 2 arrives. */
static void test_taken_rank(void) {
  job_t job = base_job(VIA_TCP, NULL, free_port(), 3);
  job.rounds = 4;
  const claim_t claims[] = {{0, 0, NULL, 0}, {1, 0, NULL, 0}, {1, 0, NULL, 0}, {1, 4, NULL, 0}, {2, 0, NULL, 1000}};
  rank_run_t runs[5];
  log_capture_start();
  run_claims(&job, 5, claims, runs);
  char *log = log_capture_end();
  check_all_ok(runs, 1, "rank 0, rank 1 twice");
  check_all_ok(runs + 4, 1, "rank 2 after rank 1 twice");
  const int first = runs[1].status == SY_SUCCESS ? 1 : 2;
  check_all_ok(runs + first, 1, "the first rank 1");
  CHECK_STATUS(runs[3 - first].open_status, SY_ERR_BOOTSTRAP);
  CHECK(runs[3 - first].seconds < 5);
  CHECK_STATUS(runs[3].open_status, SY_ERR_BOOTSTRAP);
  CHECK_LOG_HAS(log, "[rank 0] sy warn: rendezvous: rank 0 refused a hello: rank 1 connected twice (from 127.0.0.1");
  CHECK_LOG_HAS(log, "[rank 1] sy warn: rendezvous: round 0: rank 0 reports: rank 1 connected twice");
  CHECK_LOG_HAS(log, "has world size 4, rank 0 has 3");
}

/* SY_BOOT_SECRET between real ranks: the same secret everywhere works; a wrong one, none where rank 0 has one,
 * and one where rank 0 has none are refused (SY_ERR_BOOTSTRAP at once) while the right rank then gets in. No
 * log line, INFO included, carries a secret. */
static void test_secrets(void) {
  job_t job = base_job(VIA_TCP, NULL, free_port(), 3);
  job.rounds = 4;
  job.secret = secret_a;
  rank_run_t runs[4];
  log_capture_level("INFO");
  run_all(&job, runs);
  char *log = log_capture_end();
  check_all_ok(runs, 3, "the same secret everywhere");
  CHECK(strstr(log, secret_a) == NULL);
  CHECK_LOG_HAS(log, "secret proven");

  static const struct {
    const char *root, *stray, *needle;
  } cases[] = {{secret_a, secret_b, "says it is rank 1 but does not hold rank 0's SY_BOOT_SECRET"},
               {secret_a, "", "says it is rank 1 but holds no SY_BOOT_SECRET; rank 0 requires it"},
               {"", secret_b, "says it is rank 1 and holds an SY_BOOT_SECRET; rank 0 holds none"}};
  for (int i = 0; i < 3; i++) {
    job = base_job(VIA_TCP, NULL, free_port(), 3);
    job.rounds = 4;
    const claim_t claims[] = {
        {0, 0, cases[i].root, 0}, {1, 0, cases[i].stray, 0}, {2, 0, cases[i].root, 0}, {1, 0, cases[i].root, 1000}};
    log_capture_level("INFO");
    run_claims(&job, 4, claims, runs);
    log = log_capture_end();
    CHECK_STATUS(runs[1].open_status, SY_ERR_BOOTSTRAP);
    CHECK(runs[1].seconds < 5);
    check_all_ok(runs, 1, "secrets: rank 0");
    check_all_ok(runs + 2, 2, "secrets: ranks 2 and the right rank 1");
    char needle[200];
    snprintf(needle, sizeof needle, "[rank 0] sy warn: rendezvous: rank 0 refused a hello: a process from 127.0.0.1 %s",
             cases[i].needle);
    CHECK_LOG_HAS(log, needle);
    CHECK_LOG_HAS(log, "[rank 1] sy warn: rendezvous: round 0: rank 0 reports: a process from 127.0.0.1");
    CHECK(strstr(log, secret_a) == NULL && strstr(log, secret_b) == NULL);
  }
}

/* A rank holding a secret against a rank 0 played by this thread: its hello carries a proof that checks and not
 * the secret; it refuses an answer without a proof and one with a wrong proof, and takes the right one. */
static void test_root_must_prove(void) {
  static const char *needles[] = {"did not prove it holds SY_BOOT_SECRET", "its proof is wrong", NULL};
  for (int variant = 0; variant < 3; variant++) {
    int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t alen = sizeof a;
    CHECK(bind(lfd, (struct sockaddr *)&a, sizeof a) == 0 && listen(lfd, 4) == 0);
    getsockname(lfd, (struct sockaddr *)&a, &alen);
    job_t job = base_job(VIA_TCP, NULL, ntohs(a.sin_port), 2);
    job.timeout_ms = 5000;
    job.rounds = 0;
    const claim_t rank1 = {1, 0, secret_a, 0};
    rank_run_t run;
    pthread_t thread;
    log_capture_start();
    start_claims(&job, 1, &rank1, &run, &thread);
    struct pollfd pfd = {lfd, POLLIN, 0};
    int fd = poll(&pfd, 1, 5000) == 1 ? accept(lfd, NULL, NULL) : -1;
    CHECK(fd >= 0);
    unsigned char out[FRAME_BYTES + TCP_PROOF_BYTES], root_nonce[TCP_NONCE_BYTES] = {7, 7, 7};
    unsigned char hello[FRAME_BYTES + TCP_HELLO_AUTH] = {0}, want[TCP_PROOF_BYTES];
    frame_t f = {TCP_MAGIC, MSG_CHALLENGE, TCP_VERSION, 0, TCP_NONCE_BYTES};
    sy__tcp_frame_encode(&f, out);
    memcpy(out + FRAME_BYTES, root_nonce, TCP_NONCE_BYTES);
    CHECK(send(fd, out, FRAME_BYTES + TCP_NONCE_BYTES, MSG_NOSIGNAL) == FRAME_BYTES + TCP_NONCE_BYTES);
    CHECK(raw_read(fd, hello, sizeof hello, 5000) == sizeof hello);
    sy__tcp_frame_decode(hello, &f);
    CHECK(f.type == MSG_HELLO && f.a == 1 && f.b == 2 && f.length == TCP_HELLO_AUTH);
    CHECK(memmem(hello, sizeof hello, secret_a, strlen(secret_a)) == NULL);
    sy__tcp_proof(secret_a, TCP_PROOF_LEAF, root_nonce, hello + FRAME_BYTES, 1, 2, want);
    CHECK(sy__tcp_equal_ct(want, hello + FRAME_BYTES + TCP_NONCE_BYTES, TCP_PROOF_BYTES));
    const char *root_secret = variant == 1 ? secret_b : secret_a;
    sy__tcp_proof(root_secret, TCP_PROOF_ROOT, root_nonce, hello + FRAME_BYTES, 1, 2, out + FRAME_BYTES);
    f = (frame_t){TCP_MAGIC, MSG_REPLY, 0, 0, variant == 0 ? 0 : TCP_PROOF_BYTES};
    sy__tcp_frame_encode(&f, out);
    CHECK(send(fd, out, FRAME_BYTES + f.length, MSG_NOSIGNAL) == (ssize_t)(FRAME_BYTES + f.length));
    join_claims(1, &thread);
    char *log = log_capture_end();
    if (needles[variant]) {
      CHECK_STATUS(run.open_status, SY_ERR_BOOTSTRAP);
      CHECK_LOG_HAS(log, needles[variant]);
    } else {
      CHECK_OK(run.open_status);
    }
    close(fd);
    close(lfd);
  }
}

/* Rank 0 listens at its configured address and nowhere else (127.0.0.2 is this host's too, but not configured),
 * and an address that is not this host's is an error saying so, at once. */
static void test_listen_address(void) {
  static const char *addrs[] = {"127.0.0.1", "127.0.0.2"};
  for (int i = 0; i < 2; i++) {
    job_t job = base_job(VIA_TCP, NULL, free_port(), 2);
    job.addr = addrs[i];
    job.rounds = 2;
    rank_run_t runs[2];
    pthread_t threads[2];
    const claim_t rank0 = {0, 0, NULL, 0}, rank1 = {1, 0, NULL, 0};
    start_claims(&job, 1, &rank0, runs, threads);
    int probe = raw_connect(addrs[i], job.port, 10); /* rank 0 listens there ... */
    CHECK(probe >= 0);
    int other = raw_connect(addrs[1 - i], job.port, 0); /* ... and not at the other loopback address */
    CHECK(other < 0);
    if (other >= 0) close(other);
    start_claims(&job, 1, &rank1, runs + 1, threads + 1);
    join_claims(2, threads);
    check_all_ok(runs, 2, addrs[i]);
    if (probe >= 0) close(probe);
  }
  sy_boot_t *boot = NULL;
  log_capture_start();
  double t0 = now_s();
  CHECK_STATUS(sy__boot_open_tcp("192.0.2.1", free_port(), 0, 2, 5000, NULL, &boot), SY_ERR_BOOTSTRAP);
  char *log = log_capture_end();
  CHECK(now_s() - t0 < 2);
  CHECK_LOG_HAS(log, "rank 0 cannot listen on 192.0.2.1 (192.0.2.1): not an address of this host");
}

int main(void) {
  const char *tmp = getenv("TMPDIR");
  snprintf(work_dir, sizeof work_dir, "%s/sy-rendezvous-tcp-test.XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (!mkdtemp(work_dir)) {
    perror("mkdtemp");
    return 1;
  }
  unsetenv("SY_BOOT_DIR");
  unsetenv("SY_BOOT_SECRET");
  setenv("SY_DEBUG", "WARN", 1);
  sy__log_reset();

  test_sha256_hmac();
  test_idle_connections();
  test_idle_dropped();
  test_bad_hellos();
  test_taken_rank();
  test_secrets();
  test_root_must_prove();
  test_listen_address();

  remove_dir(work_dir);
  return check_report();
}
