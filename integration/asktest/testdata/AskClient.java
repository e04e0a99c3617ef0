import java.sql.*;
import java.util.ArrayList;
import java.util.List;

// Asks through nlproxy with pgjdbc: a Statement and a PreparedStatement, each
// with a `-- ask:` marker. Prints "label: cols=a,b rows=1,x;2,y", then
// "label notices: progress=true sql=true" from the statement's SQLWarning
// chain (the progress NOTICEs and the one with the SQL).
// Args: jdbc-url user password question-for-statement question-for-prepared
public class AskClient {
    public static void main(String[] args) throws Exception {
        try (Connection c = DriverManager.getConnection(args[0], args[1], args[2])) {
            try (Statement s = c.createStatement(); ResultSet rs = s.executeQuery("-- ask: " + args[3])) {
                print("statement", rs);
                notices("statement", s.getWarnings());
            }
            try (PreparedStatement ps = c.prepareStatement("-- ask: " + args[4]); ResultSet rs = ps.executeQuery()) {
                print("prepared", rs);
                notices("prepared", ps.getWarnings());
            }
            try (Statement s = c.createStatement(); ResultSet rs = s.executeQuery("SELECT 42")) {
                rs.next();
                System.out.println("after: " + rs.getString(1));
            }
        }
    }

    static void notices(String label, SQLWarning w) {
        boolean progress = false, sql = false;
        for (; w != null; w = w.getNextWarning()) {
            String m = w.getMessage();
            progress |= m.startsWith("nlproxy: generating candidate");
            sql |= m.contains("SELECT");
        }
        System.out.println(label + " notices: progress=" + progress + " sql=" + sql);
    }

    static void print(String label, ResultSet rs) throws SQLException {
        ResultSetMetaData md = rs.getMetaData();
        List<String> cols = new ArrayList<>();
        for (int i = 1; i <= md.getColumnCount(); i++) cols.add(md.getColumnName(i));
        List<String> rows = new ArrayList<>();
        while (rs.next()) {
            List<String> vals = new ArrayList<>();
            for (int i = 1; i <= md.getColumnCount(); i++) vals.add(rs.getString(i));
            rows.add(String.join(",", vals));
        }
        System.out.println(label + ": cols=" + String.join(",", cols) + " rows=" + String.join(";", rows));
    }
}
