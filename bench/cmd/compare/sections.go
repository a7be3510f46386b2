package main

// sectionNames are the sections in the order they print.
var sectionNames = []string{"redis", "memory", "middleware"}

// sectionBenchmarks are the top-level benchmarks of each section.
var sectionBenchmarks = map[string][]string{
	"redis":      {"BenchmarkRedis", "BenchmarkRedisKeyMemory"},
	"memory":     {"BenchmarkMemory"},
	"middleware": {"BenchmarkMiddleware"},
}

var (
	redisRows = []row{
		{"hot-key-1g", "one hot key, 1 goroutine"},
		{"10k-keys-1g", "10,000 keys, 1 goroutine"},
		{"hot-key-64g", "one hot key, 64 goroutines"},
		{"10k-keys-64g", "10,000 keys, 64 goroutines"},
		{"denied-1g", "denied flood, one key, 1 goroutine"},
		{"denied-64g", "denied flood, one key, 64 goroutines"},
	}
	redisCols = []column{
		{"ours", "ours (token bucket)"},
		{"redis_rate", "redis_rate (GCRA)"},
		{"ulule", "ulule/limiter (fixed window)"},
		{"throttled", "throttled (GCRA)"},
		{"ours-denycache", "ours + WithDenyCache"},
	}
	redisPeers     = []string{"redis_rate", "ulule", "throttled"}
	redisFootnotes = []string{
		"",
		"ours + WithDenyCache: the same limiter with `core.WithDenyCache(10000)`, which answers a client it has just denied from memory until its RetryAfter; shown for the denied floods only (n/a elsewhere), and not in the ratio.",
		"throttled gives up with an error after 10 failed compare-and-swap attempts on a contended key (its default); errors are shown in the cell and keep the library out of the ratio.",
	}

	memRows = []row{
		{"hot-key-1g", "one hot key, 1 goroutine"},
		{"hot-key-16g", "one hot key, 16 goroutines"},
		{"1M-keys-1g", "1,000,000 keys, 1 goroutine"},
	}
	memCols = []column{
		{"ours", "ours (memstore, token bucket)"},
		{"xtime-rate", "x/time/rate in a sync.Map"},
		{"ulule", "ulule/limiter memory (fixed window)"},
		{"throttled", "throttled memstore (GCRA)"},
	}
	memPeers = []string{"xtime-rate", "ulule", "throttled"}

	mwRows = []row{
		{"echo", "Echo v4 (peer: middleware.RateLimiter)"},
		{"fiber", "Fiber v2 (peer: middleware/limiter)"},
		{"chi", "chi v5 (peer: go-chi/httprate)"},
		{"gin", "Gin (peer: ulule/limiter's Gin middleware)"},
	}
	mwCols = []column{
		{"bare", "bare framework"},
		{"ours", "ours (token bucket)"},
		{"ours-3h", "ours, X-RateLimit-* only"},
		{"ours-0h", "ours, no field"},
		{"peer", "peer"},
		{"peer-6h", "peer + the six fields, floor"},
		{"ulule", "ulule/limiter net/http"},
	}
	mwPeers = []string{"peer", "ulule"}
)

// sections are the tables of each section.
var sections = map[string][]*table{
	"redis": {
		{
			title: "Redis: decisions per second", bench: "Redis", rows: redisRows, cols: redisCols, peers: redisPeers,
			unit: "decisions/s", format: withUnit("/s"), footnotes: redisFootnotes,
			note: "Never reached: 1,000,000 per minute (each run on keys of its own; every decision checked to be allowed). Denied flood: 10 per minute, spent before the clock starts (every decision checked to be denied). One redis-server, one `redis.NewClient` with default options, shared by all.",
		},
		{
			title: "Redis: ns per decision (wall clock ÷ decisions)", bench: "Redis", rows: redisRows, cols: redisCols, peers: redisPeers,
			unit: "ns/op", lowerBetter: true, format: microseconds, footnotes: redisFootnotes,
		},
		{
			title: "Redis: allocations per decision", bench: "Redis", rows: redisRows, cols: redisCols, peers: redisPeers,
			unit: "allocs/op", lowerBetter: true, format: allocs,
		},
		{
			title: "Redis: client CPU per decision", bench: "Redis", rows: redisRows, cols: redisCols, peers: redisPeers,
			unit: "cpu-ns/decision", lowerBetter: true, format: microseconds,
			note: "User + system CPU of the whole benchmark process (getrusage), go-redis and the runtime included, over the decisions.",
		},
		{
			title: "Redis: server CPU per decision", bench: "Redis", rows: redisRows, cols: redisCols, peers: redisPeers,
			unit: "redis-cpu-us/decision", lowerBetter: true, format: serverCPU,
			note: "redis-server's used_cpu_user + used_cpu_sys (INFO cpu) over the decisions, network included; in brackets, from INFO commandstats, the Lua script calls (EVAL, EVALSHA) per decision × the usec of one call (Redis's usec_per_call, which includes the commands the script runs). throttled runs its GET and TIME outside a script.",
		},
		{
			title: "Redis: MEMORY USAGE per key", bench: "RedisKeyMemory",
			rows: []row{
				{"fixed-window", "fixed window"},
				{"sliding-window-log", "sliding window log (1 entry)"},
				{"sliding-window-counter", "sliding window counter"},
				{"token-bucket", "token bucket / GCRA"},
				{"leaky-bucket", "leaky bucket"},
			},
			cols:  []column{{"ours", "ours"}, {"redis_rate", "redis_rate"}, {"ulule", "ulule/limiter"}, {"throttled", "throttled"}},
			peers: redisPeers, unit: "bytes/key", lowerBetter: true, format: withUnit(" B"),
			note:      "`MEMORY USAGE key SAMPLES 0` after one request on each of many new keys, averaged over 200 keys, key name included (ours: `rl:{b12-345}:bench:tb3`, redis_rate: `rate:b12-345`, ulule: `ulule:b12-345`, throttled: `throttled:b12-345`).",
			footnotes: []string{"", "n/a: the library has no such algorithm."},
		},
	},
	"memory": {
		{
			title: "Memory: ns per decision", bench: "Memory", rows: memRows, cols: memCols, peers: memPeers,
			unit: "ns/op", lowerBetter: true, format: withUnit(" ns"),
			note:      "Never reached: 1,000,000,000 per minute (one hot key sees tens of millions a minute). The million keys hold state before the clock starts; the timed decisions stride through them.",
			footnotes: []string{"", "throttled's memstore gives up with an error after 10 failed compare-and-swap attempts on a contended key; errors are shown in the cell and keep it out of the ratio."},
		},
		{
			title: "Memory: allocations per decision", bench: "Memory", rows: memRows, cols: memCols, peers: memPeers,
			unit: "allocs/op", lowerBetter: true, format: allocs,
		},
		{
			title: "Memory: heap per key", bench: "Memory", rows: memRows[2:], cols: memCols, peers: memPeers,
			unit: "bytes/key", lowerBetter: true, format: withUnit(" B"),
			note: "runtime.MemStats.HeapAlloc after a GC, less the same before, over the million keys; each key a string of its own, made as a request would make it (`b12-345678`, 10 to 12 bytes). ours and throttled are bounded at 2,000,000 keys (no eviction here); x/time/rate in a sync.Map and ulule's memory store are unbounded.",
		},
	},
	"middleware": {
		{
			title: "Middleware: ns per request", bench: "Middleware", rows: mwRows, cols: mwCols, peers: mwPeers,
			unit: "ns/op", lowerBetter: true, format: withUnit(" ns"),
			note: "One goroutine, one client IP, memory store, 1,000,000,000 per minute (never reached), `GET /users/42` through the framework's ServeHTTP into a reused recorder (Fiber: its fasthttp handler with a reused RequestCtx). Each adapter of ours with default options, which write six headers (X-RateLimit-Limit/Remaining/Reset, RateLimit-Limit/Remaining/Reset); Fiber's limiter, httprate and ulule write three, Echo's none; \"ours, X-RateLimit-* only\" is ours with `WithHeaders(headers.Config{XRateLimit: true, RetryAfter: true})`, three headers like most peers, and \"ours, no field\" with `WithHeaders(headers.Config{})`, none (neither in the ratio). \"peer + the six fields, floor\" is the peer followed by the fields it does not write, with constant values in value slices made once and shared by every response (no real limiter may share them): the least the peer could cost if it told clients what ours does (not in the ratio).",
		},
		{
			title: "Middleware: allocations per request (over the bare framework)", bench: "Middleware", rows: mwRows, cols: mwCols, peers: mwPeers,
			unit: "allocs/op", lowerBetter: true, format: overBare,
			footnotes: []string{"", "ulule/limiter's net/http middleware is measured in chi only."},
		},
	},
}
