/*
 * A small driver of the real libp4est for amrckpt's tests: it writes forests and connectivities with p4est's own
 * functions, and loads and compares what amrckpt writes.  Compiled twice, as p4est_tool (2D) and, with -DP4_TO_P8,
 * as p8est_tool (3D), against Debian's libp4est-dev (tests/p4est/build.py).
 *
 *   TOOL conn NAME OUT [NAME OUT ...]            p4est_connectivity_save of built-in connectivities
 *   TOOL save NAME LEVEL DATA SEED SAVEPART OUT  a refined, partitioned forest with DATA bytes per quadrant from SEED,
 *                                                saved by p4est_save_ext (SAVEPART: save the partition; SEED < 0:
 *                                                the uniform forest of LEVEL)
 *   TOOL equal A B DATA                          load both (p4est_load_ext, autopartition) and compare:
 *                                                p4est_connectivity_is_equal and p4est_is_equal (with data if DATA > 0);
 *                                                exit 0 when equal, 1 when not
 *   TOOL check FILE NAME LEVEL DATA SEED         load FILE and compare with the forest "save" makes from the arguments
 *                                                (SEED < 0: the uniform forest of LEVEL, not refined)
 *   TOOL checkconn FILE NAME [FILE NAME ...]     p4est_connectivity_load FILE; compare with the built-in NAME
 *   TOOL valid FILE [FILE ...]                   p4est_connectivity_load FILE (it runs p4est_connectivity_is_valid);
 *                                                print "valid 1" or "valid 0" for each
 *   TOOL load FILE DATA                          p4est_load_ext of FILE; print quadrant count and checksum
 *   TOOL adapt NAME IN OUT OP ARG MARKS          build the forest whose leaves are IN (int32 records tree, x, y[, z], level, in
 *                                                p4est's order) by p4est_new_ext and p4est_refine_ext, give each leaf the
 *                                                mark of MARKS (one byte per leaf; "-": all marked), run OP, write the
 *                                                leaves to OUT (the same records).  OP ARG: refine K:MAXLEVEL (K calls of
 *                                                p4est_refine_ext, not recursive, children inherit the mark; MAXLEVEL < 0:
 *                                                no limit), coarsen K:MINLEVEL (K calls of p4est_coarsen_ext, a family of
 *                                                marked leaves above MINLEVEL, the parent marked), balance face|edge|corner|full
 *                                                (p4est_balance).  Serial.
 *   TOOL bench FILE DATA REPS OUT                load FILE, then REPS times: p4est_save_ext to OUT, p4est_load_ext of OUT,
 *                                                each timed from a barrier to a barrier ("save S load L" per line)
 *
 * NAME is unit, periodic, rotwrap, star, moebius, corner, pillow, cubed, disk (2D); unit, periodic, rotwrap,
 * twocubes, twowrap, rotcubes, shell, sphere (3D); or brick:M,N[,P][:ABC] with periodic flags (e.g. brick:3,2:10).
 * Run serially, or under Open MPI's mpirun (the forest's partition is then p4est's own).
 */

#ifdef P4_TO_P8
#include <p4est_to_p8est.h>
#include <p8est_algorithms.h>
#include <p8est_bits.h>
#include <p8est_extended.h>
#else
#include <p4est_algorithms.h>
#include <p4est_bits.h>
#include <p4est_extended.h>
#endif
#include <sc_statistics.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct
{
  unsigned            seed;
  int                 uniform;
  int                 maxlevel;
  size_t              data_size;
}
tool_ctx_t;

static unsigned
hash_quadrant (unsigned seed, p4est_topidx_t tree, const p4est_quadrant_t * q, unsigned salt)
{
  unsigned            h = seed * 2654435761u ^ (unsigned) tree * 40503u ^ salt * 97u;

  h ^= (unsigned) q->x * 2246822519u;
  h = (h << 13) | (h >> 19);
  h ^= (unsigned) q->y * 3266489917u;
#ifdef P4_TO_P8
  h = (h << 11) | (h >> 21);
  h ^= (unsigned) q->z * 668265263u;
#endif
  h ^= (unsigned) q->level * 374761393u;
  h ^= h >> 15;
  h *= 2246822519u;
  h ^= h >> 13;
  return h;
}

static int
refine_fn (p4est_t * p4est, p4est_topidx_t which_tree, p4est_quadrant_t * q)
{
  tool_ctx_t         *ctx = (tool_ctx_t *) p4est->user_pointer;

  return q->level < ctx->maxlevel && hash_quadrant (ctx->seed, which_tree, q, 1) % 3 == 0;
}

static void
init_fn (p4est_t * p4est, p4est_topidx_t which_tree, p4est_quadrant_t * q)
{
  tool_ctx_t         *ctx = (tool_ctx_t *) p4est->user_pointer;
  unsigned char      *d = (unsigned char *) q->p.user_data;
  size_t              k;

  for (k = 0; k < ctx->data_size; ++k) {
    d[k] = (unsigned char) (hash_quadrant (ctx->seed, which_tree, q, (unsigned) k + 7) >> 7);
  }
}

/* The leaves that "adapt" builds its forest from, and the marks it gives them. */
typedef struct
{
  p4est_quadrant_t   *leaves;   /* in p4est's order; p.which_tree holds the tree */
  size_t              num_leaves;
  unsigned char      *marks;
  size_t              next;
  int                 minlevel;
}
adapt_ctx_t;

static int
leaf_cmp (const p4est_quadrant_t * a, p4est_topidx_t ta, const p4est_quadrant_t * b)
{
  if (ta != b->p.which_tree)
    return ta < b->p.which_tree ? -1 : 1;
  return p4est_quadrant_compare (a, b);
}

static int
build_refine_fn (p4est_t * p4est, p4est_topidx_t which_tree, p4est_quadrant_t * q)
{
  adapt_ctx_t        *a = (adapt_ctx_t *) p4est->user_pointer;
  size_t              lo = 0, hi = a->num_leaves, mid;

  /* the first leaf not before q: q is refined when that leaf is a strict descendant of q */
  while (lo < hi) {
    mid = lo + (hi - lo) / 2;
    if (leaf_cmp (q, which_tree, &a->leaves[mid]) > 0)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo < a->num_leaves && a->leaves[lo].p.which_tree == which_tree && p4est_quadrant_is_ancestor (q, &a->leaves[lo]);
}

static void
mark_init_fn (p4est_t * p4est, p4est_topidx_t which_tree, p4est_quadrant_t * q)
{
  adapt_ctx_t        *a = (adapt_ctx_t *) p4est->user_pointer;

  *(int *) q->p.user_data = a->marks == NULL ? 1 : a->marks[a->next];
  a->next++;
}

static int
mark_refine_fn (p4est_t * p4est, p4est_topidx_t which_tree, p4est_quadrant_t * q)
{
  return *(int *) q->p.user_data;
}

static int
mark_coarsen_fn (p4est_t * p4est, p4est_topidx_t which_tree, p4est_quadrant_t * children[])
{
  adapt_ctx_t        *a = (adapt_ctx_t *) p4est->user_pointer;
  int                 k;

  if (children[1] == NULL || children[0]->level <= a->minlevel)
    return 0;
  for (k = 0; k < P4EST_CHILDREN; ++k) {
    if (!*(int *) children[k]->p.user_data)
      return 0;
  }
  return 1;
}

static void
mark_replace_fn (p4est_t * p4est, p4est_topidx_t which_tree, int num_outgoing, p4est_quadrant_t * outgoing[],
                 int num_incoming, p4est_quadrant_t * incoming[])
{
  int                 k, m = 1;

  for (k = 0; k < num_outgoing; ++k)
    m = m && *(int *) outgoing[k]->p.user_data;
  for (k = 0; k < num_incoming; ++k)
    *(int *) incoming[k]->p.user_data = m;
}

static size_t
read_file (const char *path, void **out)
{
  FILE               *f;
  long                n;

  if (!strcmp (path, "-")) {
    *out = NULL;
    return 0;
  }
  f = fopen (path, "rb");
  if (f == NULL || fseek (f, 0, SEEK_END) || (n = ftell (f)) < 0 || fseek (f, 0, SEEK_SET)) {
    fprintf (stderr, "cannot read %s\n", path);
    exit (2);
  }
  *out = malloc ((size_t) n + 1);
  if ((long) fread (*out, 1, (size_t) n, f) != n) {
    fprintf (stderr, "cannot read %s\n", path);
    exit (2);
  }
  fclose (f);
  return (size_t) n;
}

static int
run_adapt (sc_MPI_Comm comm, p4est_connectivity_t * conn, char **argv)
{
  const int           rec = P4EST_DIM + 2;
  adapt_ctx_t         a;
  int32_t            *in, *out;
  void               *buf;
  size_t              n, k, z;
  p4est_t            *p4est;
  p4est_topidx_t      t;
  int                 levels = 0, lim = -1, i;
  FILE               *f;

  memset (&a, 0, sizeof (a));
  n = read_file (argv[3], &buf) / (rec * sizeof (int32_t));
  in = (int32_t *) buf;
  a.leaves = (p4est_quadrant_t *) calloc (n + 1, sizeof (p4est_quadrant_t));
  a.num_leaves = n;
  for (k = 0; k < n; ++k) {
    a.leaves[k].p.which_tree = in[rec * k];
    a.leaves[k].x = in[rec * k + 1];
    a.leaves[k].y = in[rec * k + 2];
#ifdef P4_TO_P8
    a.leaves[k].z = in[rec * k + 3];
#endif
    a.leaves[k].level = (int8_t) in[rec * k + rec - 1];
  }
  z = read_file (argv[7], &buf);
  a.marks = (unsigned char *) buf;
  if (a.marks != NULL && z != n) {
    fprintf (stderr, "%s has %lld marks for %lld leaves\n", argv[7], (long long) z, (long long) n);
    return 2;
  }
  p4est = p4est_new_ext (comm, conn, 0, 0, 1, sizeof (int), NULL, &a);
  p4est_refine_ext (p4est, 1, -1, build_refine_fn, NULL, NULL);
  if ((size_t) p4est->global_num_quadrants != n) {
    fprintf (stderr, "the leaves of %s are not a complete forest (%lld built)\n", argv[3],
             (long long) p4est->global_num_quadrants);
    return 2;
  }
  p4est_reset_data (p4est, sizeof (int), mark_init_fn, &a);
  if (!strcmp (argv[5], "refine") || !strcmp (argv[5], "coarsen")) {
    if (sscanf (argv[6], "%d:%d", &levels, &lim) != 2)
      return 2;
    for (i = 0; i < levels; ++i) {
      if (argv[5][0] == 'r') {
        p4est_refine_ext (p4est, 0, lim, mark_refine_fn, NULL, mark_replace_fn);
      }
      else {
        a.minlevel = lim;
        p4est_coarsen_ext (p4est, 0, 0, mark_coarsen_fn, NULL, mark_replace_fn);
      }
    }
  }
  else if (!strcmp (argv[5], "balance")) {
    p4est_connect_type_t btype = P4EST_CONNECT_FULL;

    if (!strcmp (argv[6], "face"))
      btype = P4EST_CONNECT_FACE;
#ifdef P4_TO_P8
    else if (!strcmp (argv[6], "edge"))
      btype = P8EST_CONNECT_EDGE;
#endif
    else if (!strcmp (argv[6], "corner"))
      btype = P4EST_CONNECT_CORNER;
    p4est_balance (p4est, btype, NULL);
  }
  else {
    return 2;
  }
  out = (int32_t *) malloc ((size_t) p4est->local_num_quadrants * rec * sizeof (int32_t) + 1);
  k = 0;
  for (t = p4est->first_local_tree; t <= p4est->last_local_tree; ++t) {
    sc_array_t         *qs = &p4est_tree_array_index (p4est->trees, t)->quadrants;
    size_t              j;

    for (j = 0; j < qs->elem_count; ++j, ++k) {
      p4est_quadrant_t   *q = p4est_quadrant_array_index (qs, j);

      out[rec * k] = (int32_t) t;
      out[rec * k + 1] = q->x;
      out[rec * k + 2] = q->y;
#ifdef P4_TO_P8
      out[rec * k + 3] = q->z;
#endif
      out[rec * k + rec - 1] = q->level;
    }
  }
  f = fopen (argv[4], "wb");
  if (f == NULL || fwrite (out, rec * sizeof (int32_t), k, f) != k || fclose (f)) {
    fprintf (stderr, "cannot write %s\n", argv[4]);
    return 2;
  }
  free (out);
  free (in);
  free (a.marks);
  free (a.leaves);
  p4est_destroy (p4est);
  return 0;
}

static p4est_connectivity_t *
make_conn (const char *name)
{
  if (strncmp (name, "brick:", 6) == 0) {
    int                 n[3] = { 1, 1, 1 }, per[3] = { 0, 0, 0 };
    const char         *s = name + 6, *flags;
    char               *end;
    int                 k;

    for (k = 0; k < P4EST_DIM; ++k) {
      n[k] = (int) strtol (s, &end, 10);
      s = end + (*end == ',');
    }
    flags = strchr (name + 6, ':');
    for (k = 0; flags != NULL && k < P4EST_DIM && flags[k + 1] != '\0'; ++k) {
      per[k] = flags[k + 1] == '1';
    }
#ifdef P4_TO_P8
    return p8est_connectivity_new_brick (n[0], n[1], n[2], per[0], per[1], per[2]);
#else
    return p4est_connectivity_new_brick (n[0], n[1], per[0], per[1]);
#endif
  }
#ifdef P4_TO_P8
  if (!strcmp (name, "unit"))
    return p8est_connectivity_new_unitcube ();
  if (!strcmp (name, "periodic"))
    return p8est_connectivity_new_periodic ();
  if (!strcmp (name, "rotwrap"))
    return p8est_connectivity_new_rotwrap ();
  if (!strcmp (name, "twocubes"))
    return p8est_connectivity_new_twocubes ();
  if (!strcmp (name, "twowrap"))
    return p8est_connectivity_new_twowrap ();
  if (!strcmp (name, "rotcubes"))
    return p8est_connectivity_new_rotcubes ();
  if (!strcmp (name, "shell"))
    return p8est_connectivity_new_shell ();
  if (!strcmp (name, "sphere"))
    return p8est_connectivity_new_sphere ();
#else
  if (!strcmp (name, "unit"))
    return p4est_connectivity_new_unitsquare ();
  if (!strcmp (name, "periodic"))
    return p4est_connectivity_new_periodic ();
  if (!strcmp (name, "rotwrap"))
    return p4est_connectivity_new_rotwrap ();
  if (!strcmp (name, "star"))
    return p4est_connectivity_new_star ();
  if (!strcmp (name, "moebius"))
    return p4est_connectivity_new_moebius ();
  if (!strcmp (name, "corner"))
    return p4est_connectivity_new_corner ();
  if (!strcmp (name, "pillow"))
    return p4est_connectivity_new_pillow ();
  if (!strcmp (name, "cubed"))
    return p4est_connectivity_new_cubed ();
  if (!strcmp (name, "disk"))
    return p4est_connectivity_new_disk (0, 0);
#endif
  fprintf (stderr, "unknown connectivity %s\n", name);
  exit (2);
}

static p4est_t     *
make_forest (sc_MPI_Comm comm, p4est_connectivity_t * conn, tool_ctx_t * ctx, int level)
{
  p4est_t            *p4est;

  p4est = p4est_new_ext (comm, conn, 0, level, 1, ctx->data_size, NULL, ctx);
  if (!ctx->uniform) {
    p4est_refine_ext (p4est, 1, ctx->maxlevel, refine_fn, NULL, NULL);
  }
  p4est_partition (p4est, 0, NULL);
  p4est_reset_data (p4est, ctx->data_size, init_fn, ctx);
  return p4est;
}

static p4est_t     *
load (const char *file, sc_MPI_Comm comm, size_t data_size, p4est_connectivity_t ** conn)
{
  return p4est_load_ext (file, comm, data_size, data_size > 0, 1, 0, NULL, conn);
}

static int
report_equal (p4est_t * a, p4est_connectivity_t * ca, p4est_t * b, p4est_connectivity_t * cb, int with_data, int rank)
{
  int                 conn_eq = p4est_connectivity_is_equal (ca, cb);
  int                 forest_eq = p4est_is_equal (a, b, with_data);

  if (rank == 0) {
    printf ("connectivity_is_equal %d is_equal %d quadrants %lld %lld\n", conn_eq, forest_eq,
            (long long) a->global_num_quadrants, (long long) b->global_num_quadrants);
  }
  return conn_eq && forest_eq ? 0 : 1;
}

int
main (int argc, char **argv)
{
  int                 mpiret, rank, rc = 0;
  sc_MPI_Comm         comm = sc_MPI_COMM_WORLD;
  p4est_connectivity_t *conn = NULL, *conn2 = NULL;
  p4est_t            *p4est = NULL, *p4est2 = NULL;
  tool_ctx_t          ctx;

  mpiret = sc_MPI_Init (&argc, &argv);
  SC_CHECK_MPI (mpiret);
  mpiret = sc_MPI_Comm_rank (comm, &rank);
  SC_CHECK_MPI (mpiret);
  sc_init (comm, 1, 1, NULL, SC_LP_ESSENTIAL);
  p4est_init (NULL, SC_LP_ESSENTIAL);
  memset (&ctx, 0, sizeof (ctx));

  if (argc >= 4 && argc % 2 == 0 && !strcmp (argv[1], "conn")) {
    int                 k;

    for (k = 2; k < argc; k += 2) {
      conn = make_conn (argv[k]);
      if (rank == 0 && p4est_connectivity_save (argv[k + 1], conn)) {
        fprintf (stderr, "cannot save %s\n", argv[k + 1]);
        rc = 2;
      }
      p4est_connectivity_destroy (conn);
      conn = NULL;
    }
  }
  else if (argc == 8 && !strcmp (argv[1], "save")) {
    conn = make_conn (argv[2]);
    ctx.maxlevel = atoi (argv[3]) + 2;
    ctx.data_size = (size_t) atoi (argv[4]);
    ctx.seed = (unsigned) atoi (argv[5]);
    ctx.uniform = atoi (argv[5]) < 0;
    p4est = make_forest (comm, conn, &ctx, atoi (argv[3]));
    p4est_save_ext (argv[7], p4est, ctx.data_size > 0, atoi (argv[6]));
    if (rank == 0) {
      printf ("saved %lld quadrants\n", (long long) p4est->global_num_quadrants);
    }
  }
  else if (argc == 5 && !strcmp (argv[1], "equal")) {
    size_t              ds = (size_t) atoi (argv[4]);

    p4est = load (argv[2], comm, ds, &conn);
    p4est2 = load (argv[3], comm, ds, &conn2);
    rc = report_equal (p4est, conn, p4est2, conn2, ds > 0, rank);
  }
  else if (argc == 7 && !strcmp (argv[1], "check")) {
    ctx.maxlevel = atoi (argv[4]) + 2;
    ctx.data_size = (size_t) atoi (argv[5]);
    ctx.seed = (unsigned) atoi (argv[6]);
    ctx.uniform = atoi (argv[6]) < 0;
    p4est = load (argv[2], comm, ctx.data_size, &conn);
    conn2 = make_conn (argv[3]);
    p4est2 = make_forest (comm, conn2, &ctx, atoi (argv[4]));
    rc = report_equal (p4est, conn, p4est2, conn2, ctx.data_size > 0, rank);
  }
  else if (argc >= 4 && argc % 2 == 0 && !strcmp (argv[1], "checkconn")) {
    size_t              bytes = 0;
    int                 k, eq;

    for (k = 2; k < argc; k += 2) {
      conn = p4est_connectivity_load (argv[k], &bytes);
      conn2 = make_conn (argv[k + 1]);
      eq = conn != NULL && p4est_connectivity_is_equal (conn, conn2);
      rc = rc || !eq;
      if (rank == 0) {
        printf ("%s connectivity_is_equal %d bytes %lld\n", argv[k + 1], eq, (long long) bytes);
      }
      if (conn != NULL)
        p4est_connectivity_destroy (conn);
      p4est_connectivity_destroy (conn2);
      conn = conn2 = NULL;
    }
  }
  else if (argc >= 3 && !strcmp (argv[1], "valid")) {
    int                 k;

    for (k = 2; k < argc; ++k) {
      conn = p4est_connectivity_load (argv[k], NULL);
      if (rank == 0) {
        printf ("valid %d\n", conn != NULL);
      }
      if (conn != NULL)
        p4est_connectivity_destroy (conn);
      conn = NULL;
    }
  }
  else if (argc == 4 && !strcmp (argv[1], "load")) {
    size_t              ds = (size_t) atoi (argv[3]);

    p4est = load (argv[2], comm, ds, &conn);
    if (rank == 0) {
      printf ("quadrants %lld checksum %u\n", (long long) p4est->global_num_quadrants, p4est_checksum (p4est));
    }
  }
  else if (argc == 8 && !strcmp (argv[1], "adapt")) {
    conn = make_conn (argv[2]);
    rc = run_adapt (comm, conn, argv);
  }
  else if (argc == 6 && !strcmp (argv[1], "bench")) {
    size_t              ds = (size_t) atoi (argv[3]);
    double              t0, t1, t2;
    int                 k, reps = atoi (argv[4]);

    p4est = load (argv[2], comm, ds, &conn);
    for (k = 0; k < reps; ++k) {
      mpiret = sc_MPI_Barrier (comm);
      SC_CHECK_MPI (mpiret);
      t0 = sc_MPI_Wtime ();
      p4est_save_ext (argv[5], p4est, ds > 0, 0);
      mpiret = sc_MPI_Barrier (comm);
      SC_CHECK_MPI (mpiret);
      t1 = sc_MPI_Wtime ();
      p4est2 = load (argv[5], comm, ds, &conn2);
      mpiret = sc_MPI_Barrier (comm);
      SC_CHECK_MPI (mpiret);
      t2 = sc_MPI_Wtime ();
      if (rank == 0) {
        printf ("save %.6f load %.6f\n", t1 - t0, t2 - t1);
      }
      p4est_destroy (p4est2);
      p4est_connectivity_destroy (conn2);
      p4est2 = NULL;
      conn2 = NULL;
    }
  }
  else {
    fprintf (stderr, "usage: see the comment at the top of p4est_tool.c\n");
    rc = 2;
  }

  if (p4est2 != NULL)
    p4est_destroy (p4est2);
  if (p4est != NULL)
    p4est_destroy (p4est);
  if (conn2 != NULL)
    p4est_connectivity_destroy (conn2);
  if (conn != NULL)
    p4est_connectivity_destroy (conn);
  sc_finalize ();
  mpiret = sc_MPI_Finalize ();
  SC_CHECK_MPI (mpiret);
  return rc;
}
