# Asks through nlproxy with Ruby's pg: exec, exec_params, prepare and
# exec_prepared, DEALLOCATE and reuse of the name.
#
# Usage: ruby ask_client.rb CONNINFO TOPIC
# Prints "plain: 42", one "LABEL: cols=a,b rows=1,x;2,y" line per ask, and
# the SQLSTATE of each statement Postgres refuses.
require 'pg'

def show(label, res)
  rows = res.values.map { |r| r.join(',') }.join(';')
  puts "#{label}: cols=#{res.fields.join(',')} rows=#{rows}"
end

def code(label)
  yield
  puts "#{label}: ok"
rescue PG::Error => e
  puts "#{label}: #{e.result&.error_field(PG::Result::PG_DIAG_SQLSTATE)}"
end

conninfo, topic = ARGV
conn = PG.connect(conninfo)
conn.set_notice_processor { |_| } # the proxy's NOTICE with the SQL
puts "plain: #{conn.exec('SELECT 40 + 2').getvalue(0, 0)}"
puts "plain params: #{conn.exec_params('SELECT $1::int + 2', [40]).getvalue(0, 0)}"
{
  'comment' => "/* ask: #{topic} via ruby comment */",
  'dash' => "-- ask: #{topic} via ruby dash",
  'bare' => "ASK #{topic} via ruby bare;",
  'func' => "SELECT * FROM nlproxy.ask('#{topic} via ruby func')"
}.each do |form, sql|
  show("exec #{form}", conn.exec(sql))
  show("exec_params #{form}", conn.exec_params(sql, []))
end
conn.prepare('a1', "-- ask: #{topic} via ruby prepared")
show('exec_prepared', conn.exec_prepared('a1'))
code('prepare again') { conn.prepare('a1', "-- ask: #{topic} via ruby prepared") }
conn.exec('DEALLOCATE a1')
code('exec_prepared after DEALLOCATE') { conn.exec_prepared('a1') }
conn.prepare('a1', "/* ask: #{topic} via ruby reused */")
show('reused', conn.exec_prepared('a1'))
conn.exec('BEGIN')
show('in tx', conn.exec_prepared('a1'))
conn.exec('DEALLOCATE a1')
conn.prepare('a1', 'SELECT 42')
puts "plain a1 in tx: #{conn.exec_prepared('a1').getvalue(0, 0)}"
conn.exec('COMMIT')
puts "after: #{conn.exec('SELECT 42').getvalue(0, 0)}"
