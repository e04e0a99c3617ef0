module github.com/nlproxy/nlproxy

go 1.26

require (
	github.com/jackc/pgx/v5 v5.12.0
	github.com/ollama/ollama v0.17.4
	github.com/pganalyze/pg_query_go/v5 v5.1.0
	go.uber.org/zap v1.28.0
	golang.org/x/sys v0.37.0
	golang.org/x/text v0.41.0
	google.golang.org/protobuf v1.34.1
	gopkg.in/yaml.v3 v3.0.1
)

require (
	github.com/bahlo/generic-list-go v0.2.0 // indirect
	github.com/buger/jsonparser v1.1.1 // indirect
	github.com/google/uuid v1.6.0 // indirect
	github.com/jackc/pgpassfile v1.0.0 // indirect
	github.com/jackc/pgservicefile v0.0.0-20240606120523-5a60cdf6a761 // indirect
	github.com/mailru/easyjson v0.7.7 // indirect
	github.com/rogpeppe/go-internal v1.8.0 // indirect
	github.com/wk8/go-ordered-map/v2 v2.1.8 // indirect
	go.uber.org/multierr v1.10.0 // indirect
	golang.org/x/crypto v0.43.0 // indirect
)
