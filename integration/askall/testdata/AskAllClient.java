import java.sql.*;
import java.util.ArrayList;
import java.util.List;

// Asks across databases through nlproxy with pgjdbc: a Statement and a
// PreparedStatement, each with an `ask(all):` marker. Prints, per answer,
// "label: cols=a,b rows=1,x;2,y" and one "label notice: ..." line per
// NOTICE (pgjdbc hands them over as SQLWarnings).
// Args: jdbc-url user password question-for-statement question-for-prepared
public class AskAllClient {
    public static void main(String[] args) throws Exception {
        try (Connection c = DriverManager.getConnection(args[0], args[1], args[2])) {
            try (Statement s = c.createStatement(); ResultSet rs = s.executeQuery("/* ask(all): " + args[3] + " */")) {
                print("statement", rs, s.getWarnings());
            }
            try (PreparedStatement ps = c.prepareStatement("-- ask(all): " + args[4]); ResultSet rs = ps.executeQuery()) {
                print("prepared", rs, ps.getWarnings());
            }
            try (Statement s = c.createStatement(); ResultSet rs = s.executeQuery("SELECT 42")) {
                rs.next();
                System.out.println("after: " + rs.getString(1));
            }
        }
    }

    static void print(String label, ResultSet rs, SQLWarning w) throws SQLException {
        ResultSetMetaData md = rs.getMetaData();
        List<String> cols = new ArrayList<>();
        for (int i = 1; i <= md.getColumnCount(); i++) cols.add(md.getColumnName(i));
        List<String> rows = new ArrayList<>();
        while (rs.next()) {
            List<String> vals = new ArrayList<>();
            for (int i = 1; i <= md.getColumnCount(); i++) vals.add(String.valueOf(rs.getString(i)).replace("\n", "|"));
            rows.add(String.join(",", vals));
        }
        System.out.println(label + ": cols=" + String.join(",", cols) + " rows=" + String.join(";", rows));
        for (; w != null; w = w.getNextWarning()) {
            System.out.println(label + " notice: " + w.getMessage().replace("\n", "|"));
        }
    }
}
