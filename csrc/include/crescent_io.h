/* crescent_io.h — weights on disk: the safetensors format (csrc/io/), read and written
 * in C with strict validation. Included by crescent.h, so it is FFI-clean like it.
 *
 * The format, exactly: 8 bytes u64 little-endian N, then N bytes of UTF-8 JSON (padded
 * at its end with spaces so that 8 + N is a multiple of 8), then the data section. The
 * JSON object maps each tensor name to {"dtype": "F32", "shape": [..], "data_offsets":
 * [begin, end]} (byte offsets into the data section, end exclusive; little-endian,
 * row-major data), plus an optional "__metadata__": {string: string}. Dtypes: F64 F32
 * F16 BF16 I64 I32 U8 BOOL map to crescent's; I8 I16 U16 U32 U64 and the F8/complex
 * ones are known but crescent has no such dtype (an error naming tensor and dtype).
 *
 * Writing is byte-reproducible: tensors sorted by name (bytewise), their data laid out
 * contiguously in that order, the JSON compact ({"__metadata__":{...} first, keys
 * sorted), as the reference writer lays out data. Reading checks everything before a
 * byte of tensor data is read: header length (at most 100 MB and within the file), the
 * JSON (strict; UTF-8), the keys of every entry, dtypes, shapes (at most 8 dims),
 * end - begin == numel * itemsize, and that the offsets tile the data section exactly
 * (no overlap, no hole, no truncation, no trailing bytes); BOOL bytes must be 0 or 1.
 * Every failure names the file and the key; no byte sequence crashes the reader. */
#ifndef CRESCENT_IO_H
#define CRESCENT_IO_H

/* Writes n tensors (CPU, any strides: non-contiguous ones are written from a contiguous
 * copy) under names[i] to `path` atomically: into `path.tmp.<pid>`, flushed and fsynced,
 * renamed over `path`, then the directory fsynced. metadata_json is NULL, "" or a JSON
 * object of string values ({"epoch": "3"}); it is stored with its keys sorted. Names
 * must be distinct, valid UTF-8, and not "__metadata__". */
cr_status cr_io_save_safetensors(const char *path, const char *const *names,
                                 cr_tensor *const *tensors, int64_t n,
                                 const char *metadata_json);

/* The same write on a thread of its own (a checkpoint off the step path): the tensors
 * are retained until the file is written and must not change meanwhile (pass copies);
 * names, path and metadata are copied. cr_io_save_done tells whether it has finished;
 * cr_io_save_wait waits, frees the job and returns the write's status (with its message,
 * as cr_io_save_safetensors would have set it). */
typedef struct cr_io_save_job cr_io_save_job;
cr_status cr_io_save_async(cr_io_save_job **out, const char *path, const char *const *names,
                           cr_tensor *const *tensors, int64_t n, const char *metadata_json);
bool cr_io_save_done(cr_io_save_job *job);
cr_status cr_io_save_wait(cr_io_save_job *job);

/* A loaded file: its tensors sorted by name, and its metadata. */
typedef struct cr_io_file cr_io_file;

cr_status cr_io_load_safetensors(cr_io_file **out, const char *path);
int64_t cr_io_file_count(const cr_io_file *f);
/* Borrowed strings, valid until cr_io_file_free; NULL when i is out of range. */
const char *cr_io_file_name(const cr_io_file *f, int64_t i);
/* A new reference (release with cr_tensor_free); NULL when i is out of range. */
cr_tensor *cr_io_file_tensor(const cr_io_file *f, int64_t i);
/* The metadata as a compact JSON object with sorted keys ("{}" when there is none), and
 * the same pairs one by one (sorted by key). */
const char *cr_io_file_metadata_json(const cr_io_file *f);
int64_t cr_io_file_metadata_count(const cr_io_file *f);
const char *cr_io_file_metadata_key(const cr_io_file *f, int64_t i);
const char *cr_io_file_metadata_value(const cr_io_file *f, int64_t i);
void cr_io_file_free(cr_io_file *f);

/* ---- TensorBoard event files (csrc/io/tfevents.c) ----------------------------------
 * A TFRecord file: each record is u64 LE length, u32 LE masked CRC-32C of those 8 bytes,
 * the data, u32 LE masked CRC-32C of the data; masked(c) = ((c >> 15) | (c << 17)) +
 * 0xa282ead8. CRC-32C is the Castagnoli CRC (reflected polynomial 0x82F63B78). Each
 * record holds a serialized Event protobuf: 1 wall_time (double), 2 step (int64),
 * 3 file_version ("brain.Event:2", first record only), 5 summary (Summary: repeated
 * 1 value; Value: 1 tag, 2 simple_value (float)). The file is
 * <dir>/events.out.tfevents.<unix seconds>.<hostname> (".<k>" appended when another
 * writer took that name in the same second); an existing file is never overwritten. */
typedef struct cr_tb_writer cr_tb_writer;

/* A copy of everything this process writes to stdout and stderr (print, io.write, C's
 * stdio, child processes), appended to the file `path` (a run folder's log.txt) by a
 * thread that passes the bytes on to the original stdout and stderr unchanged. In the
 * file a carriage return drops the line so far, so a progress line rewritten in place
 * keeps its last state; lines of stdout and stderr stay whole (between the two streams
 * the order is the order the thread read them). One copy at a time: starting another stops the first. It stops
 * at exit (stdio flushed first) or with cr_tee_stop, which waits for every byte. */
cr_status cr_tee_start(const char *path);
void cr_tee_stop(void);
/* Where fd 1 or 2 wrote before the copy started (its saved descriptor), else fd itself:
 * what to ask whether the output is a terminal, and how wide it is. */
int cr_tee_original_fd(int fd);

/* The console's live progress line (crescent.hooks.live_line draws it on stdout, rewritten
 * with '\r', and says when one is up or has ended). cr_console_end_live_line ends one that
 * is up with a newline on stdout, so that a message printed next (on stdout or stderr: the
 * copy of cr_tee_start reads stdout first) starts on a line of its own. */
void cr_console_set_live_line(int up);
int cr_console_live_line_up(void);
void cr_console_end_live_line(void);

/* CRC-32C of n bytes ("123456789" -> 0xE3069283). */
uint32_t cr_crc32c(const void *data, size_t n);
/* Creates the event file in `dir` (which must exist and be writable) and writes the
 * file_version record. Errors name the folder and the fix. */
cr_status cr_tb_open(cr_tb_writer **out, const char *dir);
/* The file's path (borrowed, valid until cr_tb_close). */
const char *cr_tb_path(const cr_tb_writer *w);
/* Buffers one scalar event (value stored as a float, as simple_value is). wall_time in
 * unix seconds; <= 0 means now. Tags are non-empty UTF-8 of at most 1024 bytes. */
cr_status cr_tb_add_scalar(cr_tb_writer *w, const char *tag, double value, int64_t step,
                           double wall_time);
/* Buffers one text event for TensorBoard's text plugin (Markdown; at most 32 KiB of
 * UTF-8), e.g. the run's config at step 0. */
cr_status cr_tb_add_text(cr_tb_writer *w, const char *tag, const char *text, int64_t step, double wall_time);
/* One hyper-parameter of a run for TensorBoard's HParams plugin: a number, a string or a
 * bool (number != 0), by kind. */
enum { CR_TB_HPARAM_NUMBER = 0, CR_TB_HPARAM_STRING = 1, CR_TB_HPARAM_BOOL = 2 };
typedef struct cr_tb_hparam {
    const char *name;
    int kind;
    double number;
    const char *string;
} cr_tb_hparam;
/* Buffers the run's hyper-parameters (the HParams plugin's session_start_info; names and
 * texts UTF-8), so TensorBoard's HParams tab lists the run with them beside its scalars.
 * start_time in unix seconds; <= 0 means now. */
cr_status cr_tb_add_hparams(cr_tb_writer *w, const cr_tb_hparam *hp, int n, double start_time);
/* Buffers the end of the run (session_end_info) with its status. */
enum { CR_TB_STATUS_SUCCESS = 1, CR_TB_STATUS_FAILURE = 2, CR_TB_STATUS_RUNNING = 3 };
cr_status cr_tb_end_session(cr_tb_writer *w, int status, double end_time);
/* Writes the buffered records to the file. */
cr_status cr_tb_flush(cr_tb_writer *w);
/* Flushes, closes and frees the writer (NULL is fine); the writer is gone even when the
 * final write fails. */
cr_status cr_tb_close(cr_tb_writer *w);

#endif
