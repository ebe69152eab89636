/* pg_infer: vindex files that change under a backend, and cancels inside liblarql.
 *
 * A backend maps a vindex's files read-only and keeps them for the session. If a file is
 * truncated in place while mapped, reading a page past its new end raises SIGBUS: with the
 * default action the backend dies and the postmaster restarts every backend. Two defences:
 *
 * - Before every use, the identity (inode, size, mtime, ctime) of the files the library
 *   maps is compared with the one taken when the vindex was opened; a vindex that changed
 *   is closed and opened again (which fails cleanly while the files are broken). This
 *   covers every change made between two queries.
 * - A change during a query is caught by a SIGBUS handler that asks liblarql to put a page
 *   of zeros in place of the vanished one (lq_mapfault_recover, the mechanism `larql
 *   serve` uses); the read goes on, so no jump ever crosses library code (which may hold
 *   malloc'd memory) or PostgreSQL's PG_TRY frames. The library's cancel hook then stops
 *   the scan at its next poll, and the extension, back in its own code, sees the fault
 *   count moved: it closes every local model of this backend (any of them may hold the
 *   zero page) and raises an ERROR (SQLSTATE 58030). The next query re-opens the files.
 *
 * The cancel hook only reads flags: it never calls PostgreSQL (no ereport inside library
 * code); the library unwinds with LQ_ECANCELED and pgi_lq_error turns that into
 * CHECK_FOR_INTERRUPTS or the I/O error. */
#include "pg_infer.h"

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/stat.h>

#include "larql/mapfault.h"
#include "miscadmin.h"

static struct sigaction prev_bus;
static bool bus_installed;
/* lq_mapfault_count() when this backend last checked: a difference is a fault not yet
 * reported */
static uint64 faults_seen;
/* what a vanished page costs: every local model closed (registry.c's, given by _PG_init, so
 * that this file depends on no other of the extension) */
static void (*close_local)(void);

/* SIGBUS: a page of a file liblarql maps becomes zeros and the read resumes; any other bus
 * error gets the previous action back (the default one dumps core, as before). */
static void
bus_handler(int sig, siginfo_t *si, void *uctx)
{
	int			save = errno;

	/* si_code > 0: raised by the kernel for a memory access (not kill()) */
	if (si != NULL && si->si_code > 0 && lq_mapfault_recover(si->si_addr))
	{
		errno = save;
		return;
	}
	sigaction(SIGBUS, &prev_bus, NULL);
	/* a fault re-executes the access and faults again under the previous action; a signal
	 * sent by kill() would not, so it is raised again (delivered once this handler returns) */
	if (si == NULL || si->si_code <= 0)
		raise(sig);
	errno = save;
}

void
pgi_guard_init(void (*close_all_local)(void))
{
	struct sigaction sa;

	close_local = close_all_local;
	if (bus_installed)
		return;
	memset(&sa, 0, sizeof sa);
	sa.sa_sigaction = bus_handler;
	sa.sa_flags = SA_SIGINFO | SA_RESTART;
	sigemptyset(&sa.sa_mask);
	if (sigaction(SIGBUS, &sa, &prev_bus) == 0)
		bus_installed = true;
	faults_seen = lq_mapfault_count();
}

bool
pgi_fault_pending(void)
{
	return lq_mapfault_count() != faults_seen;
}

void
pgi_mapcheck(void)
{
	if (!pgi_fault_pending())
		return;
	faults_seen = lq_mapfault_count();
	/* the fault's mapping is not known: every local model may hold a zero page */
	if (close_local)
		close_local();
	ereport(ERROR,
			(errcode(ERRCODE_IO_ERROR),
			 errmsg("vindex files changed on disk while this query read them (truncated or rewritten in place)"),
			 errdetail("A page of a mapped vindex file vanished; the query's results would be wrong."),
			 errhint("The models of this session were closed; the next query re-opens their files "
					 "(and fails until they are whole again).")));
}

bool
pgi_fault_forget(void)
{
	if (!pgi_fault_pending())
		return false;
	faults_seen = lq_mapfault_count();
	if (close_local)
		close_local();
	return true;
}

/* The library's cancel hook, called on this backend's thread every few ms of work (gate
 * rows, describe_many entities, vindex open stages): reads flags only. */
int
pgi_cancel_hook(void *ctx)
{
	return QueryCancelPending || ProcDiePending || pgi_fault_pending();
}

/* Files of a vindex whose change matters: what liblarql maps or reads when it opens one
 * (index.json, tokenizer.json, every *.bin but the KNN store, which is read into memory
 * and rewritten by edits), and every file of a subdirectory (an inference vindex keeps its
 * per-tensor weights in bitnet/, mapped by infer()'s engine). */
static bool
watched(const char *name, bool top)
{
	size_t		n = strlen(name);

	if (!top)
		return name[0] != '.';
	if (strcmp(name, "index.json") == 0 || strcmp(name, "tokenizer.json") == 0)
		return true;
	return n > 4 && strcmp(name + n - 4, ".bin") == 0 && strncmp(name, "knn_store", 9) != 0;
}

static uint64
mix(uint64 h, uint64 x)
{
	/* FNV-1a over the 8 bytes of x */
	for (int i = 0; i < 8; i++)
	{
		h ^= (x >> (8 * i)) & 0xff;
		h *= UINT64CONST(1099511628211);
	}
	return h;
}

/* Sum of the per-file hashes of dir's watched files (a sum: the order of the directory's
 * entries does not matter); top: the vindex directory itself, whose subdirectories are
 * visited once (depth 1). *n counts the files. */
static uint64
dir_identity(const char *dir, bool top, int *n)
{
	DIR		   *d = opendir(dir);
	struct dirent *e;
	uint64		sum = 0;

	if (d == NULL)
		return 0;
	while ((e = readdir(d)) != NULL)
	{
		char		p[MAXPGPATH];
		struct stat st;
		uint64		h = UINT64CONST(14695981039346656037);

		if (e->d_name[0] == '.' || snprintf(p, sizeof p, "%s/%s", dir, e->d_name) >= (int) sizeof p ||
			stat(p, &st) != 0)
			continue;
		if (S_ISDIR(st.st_mode))
		{
			if (top)
				sum += mix(dir_identity(p, false, n), (uint64) st.st_ino);
			continue;
		}
		if (!S_ISREG(st.st_mode) || !watched(e->d_name, top))
			continue;
		for (const char *c = e->d_name; *c; c++)
			h = mix(h, (unsigned char) *c);
		h = mix(h, (uint64) st.st_ino);
		h = mix(h, (uint64) st.st_size);
		h = mix(h, (uint64) st.st_mtim.tv_sec);
		h = mix(h, (uint64) st.st_mtim.tv_nsec);
		h = mix(h, (uint64) st.st_ctim.tv_sec);
		h = mix(h, (uint64) st.st_ctim.tv_nsec);
		sum += h;
		(*n)++;
	}
	closedir(d);
	return sum;
}

uint64
pgi_files_identity(const char *dir)
{
	int			n = 0;
	uint64		sum = dir_identity(dir, true, &n);

	if (n == 0)
		return 0;				/* gone or empty: never equal to an identity taken at open */
	return mix(sum, (uint64) n) | 1;	/* never 0 */
}
